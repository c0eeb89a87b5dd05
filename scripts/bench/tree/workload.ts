/** `bench tree`'s compactor workload: a counting summarizer, synthetic conversations, ingest, drain and counts. */
import { NODE_QUEUE } from "../../../src/compactor/queue.js";
import type { Summarizer } from "../../../src/compactor/summarizer.js";
import { promptBytes } from "../../../src/core/summary.js";
import type { Memory } from "../../../src/memory/service.js";
import { type SyntheticRecord, sleep, syntheticEvent } from "../common.js";
import { unit } from "./synthetic.js";

export interface SummarizerStats {
  calls: number;
  retryCalls: number;
  requestBytes: number;
  contextBytes: number;
  busyMs: number;
  /** Token usage as the summarizer reported it (the fake estimates it; providers through the simulator measure it). */
  inputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  outputTokens: number;
}

/** The fake summarizer, counting calls and the bytes of every request it receives. */
export function countingSummarizer(inner: Summarizer): { summarizer: Summarizer; stats: SummarizerStats } {
  const stats: SummarizerStats = {
    calls: 0,
    retryCalls: 0,
    requestBytes: 0,
    contextBytes: 0,
    busyMs: 0,
    inputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    outputTokens: 0,
  };
  return {
    stats,
    summarizer: {
      ...inner,
      async complete(prompt, options) {
        stats.calls += 1;
        stats.requestBytes += promptBytes(prompt);
        if (prompt.followUps.length > 0) stats.retryCalls += 1;
        stats.contextBytes += prompt.context.reduce((sum, block) => sum + block.bytes, 0);
        const start = performance.now();
        try {
          const answer = await inner.complete(prompt, options);
          stats.inputTokens += answer.usage.inputTokens;
          stats.cacheReadTokens += answer.usage.cacheReadTokens;
          stats.cacheWriteTokens += answer.usage.cacheWriteTokens;
          stats.outputTokens += answer.usage.outputTokens;
          return answer;
        } finally {
          stats.busyMs += performance.now() - start;
        }
      },
    },
  };
}

export interface SyntheticMessage extends SyntheticRecord {
  readonly turn: number;
}

export const TOOLS = ["read", "bash", "edit", "grep", "glob", "write"];

/**
 * A deterministic coding-agent conversation: turns of a user message, an assistant reply, 0-5 tool call/result pairs
 * and a closing reply. Sizes: user 20-600 B (mostly short), assistant 60-2,460 B, tool calls 40-400 B, tool results
 * log-uniform 80 B - 24 KB.
 */
export function conversation(session: number, count: number, seed: number, filler: string): SyntheticMessage[] {
  const out: SyntheticMessage[] = [];
  const pick = (k: number, salt: number) => unit(seed + 1000 * (session + 1), 11, k, salt);
  const text = (k: number, bytes: number) => {
    const head = `[s${session} m${k}] `;
    const body = Math.max(1, Math.round(bytes) - head.length);
    let at = Math.floor(pick(k, 9) * (filler.length - body - 64));
    at = filler.indexOf(" ", at) + 1;
    return `${head}${filler.slice(at, at + body).trim()}`;
  };
  let turn = 0;
  while (out.length < count) {
    const k = () => out.length;
    out.push({ kind: "user", turn, content: text(k(), 20 + 580 * pick(k(), 1) ** 2.5) });
    out.push({ kind: "assistant", turn, content: text(k(), 60 + 2400 * pick(k(), 2) ** 2) });
    const tools = Math.floor(pick(k(), 3) * 6);
    for (let t = 0; t < tools; t++) {
      const toolName = TOOLS[Math.floor(pick(k(), 4) * TOOLS.length)] as string;
      const toolCallId = `call_${session}_${turn}_${t}`;
      out.push({ kind: "tool_call", turn, toolName, toolCallId, content: text(k(), 40 + 360 * pick(k(), 5) ** 1.5) });
      out.push({ kind: "tool_result", turn, toolName, toolCallId, content: text(k(), 80 * 300 ** pick(k(), 6)) });
    }
    out.push({ kind: "assistant", turn, content: text(k(), 60 + 2400 * pick(k(), 7) ** 2) });
    turn += 1;
  }
  return out.slice(0, count);
}

export interface BenchSession {
  readonly sessionId: string;
  readonly hostSessionId: string;
  readonly messages: readonly SyntheticMessage[];
}

export async function openSessions(
  memory: Memory,
  phase: string,
  sessions: number,
  messages: number,
  seed: number,
  filler: string,
  label: string = phase,
): Promise<BenchSession[]> {
  const out: BenchSession[] = [];
  for (let s = 0; s < sessions; s++) {
    const count = Math.floor(messages / sessions) + (s < messages % sessions ? 1 : 0);
    const hostSessionId = `bench-tree-${label}-s${s}`;
    const session = await memory.openSession({ host: "bench", hostSessionId, projectId: "bench-project" });
    const salt = phase === "live" ? s : s + sessions;
    out.push({ sessionId: session.sessionId, hostSessionId, messages: conversation(salt, count, seed, filler) });
  }
  return out;
}

export const INGEST_BATCH = 10;

/** Ingests every session's messages in rounds of INGEST_BATCH per session, the sessions concurrently. */
export async function ingestAll(
  memory: Memory,
  sessions: readonly BenchSession[],
  signal: AbortSignal,
): Promise<number> {
  let sealed = 0;
  const longest = Math.max(0, ...sessions.map((s) => s.messages.length));
  for (let from = 0; from < longest && !signal.aborted; from += INGEST_BATCH) {
    const results = await Promise.all(
      sessions.map((session) => {
        const slice = session.messages.slice(from, from + INGEST_BATCH);
        if (slice.length === 0) return Promise.resolve([]);
        return memory.ingestMany(
          slice.map((message, k) => syntheticEvent(session, `t${message.turn}`, from + k, message)),
        );
      }),
    );
    for (const list of results) for (const result of list) if (result.status === "sealed") sealed += 1;
  }
  return sealed;
}

export async function openNodeJobs(memory: Memory): Promise<number> {
  const result = await memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state IN ('created', 'retry', 'active')",
    [NODE_QUEUE],
  );
  return result.rows[0]?.n ?? 0;
}

/** Waits until every session is settled and no node job is left open; throws on timeout. */
export async function waitDrained(
  memory: Memory,
  sessions: readonly BenchSession[],
  deadline: number,
  signal: AbortSignal,
): Promise<void> {
  for (const session of sessions) {
    if (signal.aborted) return;
    await memory.settle(session.sessionId, { timeoutMs: Math.max(0, Math.round(deadline - performance.now())) });
  }
  for (;;) {
    if (signal.aborted) return;
    const open = await openNodeJobs(memory);
    if (open === 0) return;
    if (performance.now() > deadline) throw new Error(`${open} optchat-node job(s) still open after the drain timeout`);
    await sleep(25);
  }
}

/** Nodes of a complete binary tree over T leaves: every (level, index) with (index+1)·2^level <= T. */
export function fullTreeNodes(leaves: number): number {
  let total = 0;
  for (let level = 0; 2 ** level <= leaves; level++) total += Math.floor(leaves / 2 ** level);
  return total;
}

export interface NodeCounts {
  nodes: number;
  distinct_nodes: number;
  leaves: number;
  free_nodes: number;
  free_leaves: number;
  free_parents: number;
  attempts: number;
  model_nodes: number;
  retried_nodes: number;
  overshoot_nodes: number;
  text_bytes: number;
  view_revisions: number;
  view_parts: number;
  final_view_lines: number;
  final_view_bytes: number;
}

export async function countNodes(memory: Memory, sessions: readonly BenchSession[]): Promise<NodeCounts> {
  const result = await memory.pool.query<NodeCounts>(
    `WITH t AS (SELECT tree_id FROM optchat.trees WHERE session_id = ANY($1::text[]))
     SELECT count(*)::int AS nodes,
            count(DISTINCT (n.tree_id, n.level, n.idx))::int AS distinct_nodes,
            count(*) FILTER (WHERE n.level = 0)::int AS leaves,
            count(*) FILTER (WHERE n.summarizer = 'free')::int AS free_nodes,
            count(*) FILTER (WHERE n.summarizer = 'free' AND n.level = 0)::int AS free_leaves,
            count(*) FILTER (WHERE n.summarizer = 'free' AND n.level > 0)::int AS free_parents,
            coalesce(sum(n.attempts), 0)::int AS attempts,
            count(*) FILTER (WHERE n.attempts > 0)::int AS model_nodes,
            count(*) FILTER (WHERE n.attempts > 1)::int AS retried_nodes,
            count(*) FILTER (WHERE n.overshoot)::int AS overshoot_nodes,
            coalesce(sum(n.byte_length), 0)::bigint AS text_bytes,
            (SELECT count(*) FROM optchat.view_revisions v WHERE v.tree_id IN (SELECT tree_id FROM t))::int AS view_revisions,
            (SELECT count(*) FROM optchat.view_parts p WHERE p.tree_id IN (SELECT tree_id FROM t))::int AS view_parts,
            (SELECT count(*) FROM optchat.view_parts p
              WHERE p.tree_id IN (SELECT tree_id FROM t) AND p.until_revision IS NULL)::int AS final_view_lines,
            (SELECT coalesce(sum(v.bytes), 0) FROM optchat.trees tr
               JOIN optchat.view_revisions v ON v.tree_id = tr.tree_id AND v.revision = tr.view_revision
              WHERE tr.tree_id IN (SELECT tree_id FROM t))::int AS final_view_bytes
       FROM optchat.nodes n WHERE n.tree_id IN (SELECT tree_id FROM t)`,
    [sessions.map((s) => s.sessionId)],
  );
  return result.rows[0] as NodeCounts;
}
