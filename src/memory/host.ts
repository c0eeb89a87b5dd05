import { storableText } from "../core/text.js";
import type { Pool } from "../store/db.js";
import { type Injection, listInjections, type NewInjection, recordInjection } from "../store/injections.js";
import { jobsWaitingForWorker } from "../store/job-queue.js";
import { claimSessionLease, type LeaseClaim, releaseSessionLease, renewSessionLease } from "../store/leases.js";
import {
  type AdapterProblem,
  findAdapterProblem,
  listAdapterProblems,
  type NewAdapterProblem,
  recordAdapterProblem,
} from "../store/problems.js";
import { hostMessageSeqs } from "../store/records.js";
import { findSessionByHost, type Session } from "../store/sessions.js";
import {
  listStuckTurns,
  readSessionHealth,
  readTreeProgress,
  type SessionHealth,
  type StuckTurn,
} from "../store/status.js";
import { turnToolResultSeqs } from "../store/turn-steps.js";
import { listActiveTurns, type Turn } from "../store/turns.js";

export type { AdapterProblem, Injection, LeaseClaim, NewAdapterProblem, NewInjection, SessionHealth, StuckTurn };

/**
 * What a host adapter (the OpenCode plugin) needs beyond the memory operations: session leases, a record of every
 * injection and caught problem for inspection, and the mapping from host messages to sealed records.
 */
export interface HostSupport {
  claimLease(input: { sessionId: string; holder: string; ttlMs: number; takeOverFrom?: string }): Promise<LeaseClaim>;
  renewLease(input: { sessionId: string; holder: string; fence: number; ttlMs: number }): Promise<boolean>;
  releaseLease(input: { sessionId: string; holder: string; fence: number }): Promise<boolean>;
  recordInjection(injection: NewInjection): Promise<number>;
  listInjections(sessionId: string, limit?: number): Promise<Injection[]>;
  reportProblem(problem: NewAdapterProblem): Promise<void>;
  listProblems(host: string, hostSessionId: string, limit?: number): Promise<AdapterProblem[]>;
  findProblem(
    host: string,
    hostSessionId: string,
    code: string,
  ): Promise<{ message: string; createdAt: Date } | undefined>;
  sessionHealth(sessionId: string): Promise<SessionHealth>;
  /** The highest sealed seq of each host message of the session's current generation. */
  hostMessageSeqs(sessionId: string, generation: number): Promise<Map<string, number>>;
  /**
   * The own-session ref (`seq+1`) of every stored tool result of a turn, by its tool call id: what an execution
   * checkpoint's lines point at, each one memory_zoom away from the exact output (issue 36); only those whose seq is
   * above `afterSeq` when given.
   */
  turnResultRefs(
    sessionId: string,
    generation: number,
    turnId: string,
    afterSeq?: number,
  ): Promise<Map<string, { ref: string; seq: number }>>;
  activeTurns(sessionId: string): Promise<Turn[]>;
  /**
   * Active turns whose session lease expired (or, with `holderGone`, is held by a process the caller knows is gone),
   * of one session or of every session of one project.
   */
  stuckTurns(filter: { sessionId?: string; projectId?: string; holderGone?: boolean }): Promise<StuckTurn[]>;
  /** True when a compactor job that could run has waited longer than `seconds` (default 30) for a worker. */
  jobsWaitingForWorker(seconds?: number): Promise<boolean>;
  /** Leaves of the session's tree of `generation` and how many are built (summarized). */
  treeProgress(sessionId: string, generation: number): Promise<{ leaves: number; builtLeaves: number }>;
  findSession(host: string, hostSessionId: string): Promise<Session | undefined>;
}

export function createHostSupport(pool: Pool): HostSupport {
  return {
    claimLease: (input) => claimSessionLease(pool, input),
    renewLease: (input) => renewSessionLease(pool, input),
    releaseLease: (input) => releaseSessionLease(pool, input),
    // Diagnostics quote user text and error messages: repaired (NUL, unpaired surrogates) rather than lost to 22021.
    recordInjection: (injection) =>
      recordInjection(pool, {
        ...injection,
        query: injection.query === null ? null : storableText(injection.query),
        error: injection.error === null ? null : storableText(injection.error),
      }),
    listInjections: (sessionId, limit = 5) => listInjections(pool, sessionId, limit),
    reportProblem: (problem) => recordAdapterProblem(pool, { ...problem, message: storableText(problem.message) }),
    listProblems: (host, hostSessionId, limit = 5) => listAdapterProblems(pool, host, hostSessionId, limit),
    findProblem: (host, hostSessionId, code) => findAdapterProblem(pool, host, hostSessionId, code),
    sessionHealth: (sessionId) => readSessionHealth(pool, sessionId),
    hostMessageSeqs: (sessionId, generation) => hostMessageSeqs(pool, sessionId, generation),
    turnResultRefs: async (sessionId, generation, turnId, afterSeq) => {
      const seqs = await turnToolResultSeqs(pool, sessionId, generation, turnId, afterSeq);
      return new Map([...seqs].map(([callId, seq]) => [callId, { ref: `${seq}+1`, seq }]));
    },
    activeTurns: (sessionId) => listActiveTurns(pool, sessionId),
    stuckTurns: (filter) => listStuckTurns(pool, filter),
    jobsWaitingForWorker: (seconds = 30) => jobsWaitingForWorker(pool, seconds),
    treeProgress: (sessionId, generation) => readTreeProgress(pool, sessionId, generation),
    findSession: (host, hostSessionId) => findSessionByHost(pool, host, hostSessionId),
  };
}
