/**
 * Execution checkpoints in OpenCode 1.18.33's request (issue 36, docs/checkpoints.md): the live turn's steps are the
 * assistant messages after the person's request message, one per model step (a parallel batch is one message); when
 * they outgrow their budget, the first of them are taken out of the request and a checkpoint block (src/core/
 * checkpoint-lines.ts) is appended to the request message, after the person's own words, which stay verbatim. Where
 * to cut is decided by src/core/checkpoint-cut.ts; the lines point at the stored tool results (memory.host
 * turnResultRefs), so each step is one memory_zoom away from its exact output.
 */
import {
  type CheckpointStep,
  checkpointCap,
  estimateTokens,
  growCheckpoint,
  planCut,
  type SentCheckpoint,
} from "../../src/memory/index.js";
import type { HostMessage, HostPart } from "../opencode/messages.js";
import { messageText } from "../opencode/messages.js";

/** The checkpoint of a session's live turn, per session state. */
interface CheckpointMemo {
  turnId: string;
  cut: number;
  /** The checkpoint the turn's last request sent (the next one grows from it); `missingRefs`: some call had no ref. */
  checkpoint?: SentCheckpoint & { missingRefs: boolean };
}

const memos = new WeakMap<object, CheckpointMemo>();

function memoOf(state: object): CheckpointMemo | undefined {
  return memos.get(state);
}

/** The refs of a live turn's stored results read so far, per session state: each read asks only for newer ones. */
const readRefs = new WeakMap<object, { key: string; refs: Map<string, string>; maxSeq: number }>();

/**
 * The refs of the turn's stored tool results by call id, reading only the results stored since the last read (so a
 * step's work does not grow with the turn). `read(afterSeq)` reads those above a seq.
 */
export async function turnRefs(
  state: object,
  key: string,
  read: (afterSeq: number) => Promise<ReadonlyMap<string, { ref: string; seq: number }>>,
): Promise<ReadonlyMap<string, string>> {
  const known = readRefs.get(state);
  const held = known?.key === key ? known : { key, refs: new Map<string, string>(), maxSeq: -1 };
  for (const [callId, { ref, seq }] of await read(held.maxSeq)) {
    held.refs.set(callId, ref);
    held.maxSeq = Math.max(held.maxSeq, seq);
  }
  readRefs.set(state, held);
  return held.refs;
}

/** The turn's steps: the run of assistant messages right after the request message. */
function stepRange(messages: readonly HostMessage[], requestIndex: number): { from: number; to: number } {
  let to = requestIndex + 1;
  while (to < messages.length && (messages[to] as HostMessage).info.role === "assistant") to += 1;
  return { from: requestIndex + 1, to };
}

/** Each step's lines, built when a checkpoint needs them (one that grows needs only the new steps'). */
function lazyCalls(hosts: readonly HostMessage[], refs: ReadonlyMap<string, string>) {
  const calls: CheckpointStep[] = [];
  let built = false;
  return {
    stepsOf: (a: number, b: number): CheckpointStep[] => {
      for (let i = a; i < b; i++) {
        if (calls[i]) continue;
        calls[i] = stepCalls(hosts[i] as HostMessage, refs);
        built = true;
      }
      return calls.slice(a, b);
    },
    /** Some step's lines were built. */
    built: () => built,
  };
}

/** Every tool call of the messages has its stored result's ref. */
function allStored(hosts: readonly HostMessage[], refs: ReadonlyMap<string, string>): boolean {
  return hosts.every((m) => toolParts(m).every((p) => refs.has(p.callID ?? p.id)));
}

/** The estimated tokens of the live turn's settled messages by id, per session state. */
const settled = new WeakMap<object, { turnId: string; tokens: Map<string, number> }>();

/**
 * A message's estimated tokens, kept once it is settled (a step whose results are in, with a later message after it):
 * OpenCode sends every message of the turn at every step, and estimating them all again would make a step's work grow
 * with the turn.
 */
export function messageTokens(state: object, turnId: string, message: HostMessage, isSettled: boolean): number {
  const known = settled.get(state);
  const held = known?.turnId === turnId ? known : { turnId, tokens: new Map<string, number>() };
  settled.set(state, held);
  const kept = held.tokens.get(message.info.id);
  if (kept !== undefined) return kept;
  const tokens = estimateTokens(messageText(message));
  if (isSettled) held.tokens.set(message.info.id, tokens);
  return tokens;
}

/** A message all of whose tool calls have their results (completed or failed). */
export function toolsDone(message: HostMessage): boolean {
  return toolParts(message).every((p) => p.state?.status === "completed" || p.state?.status === "error");
}

function toolParts(message: HostMessage): HostPart[] {
  return message.parts.filter((p) => p.type === "tool");
}

function stepCalls(message: HostMessage, refs: ReadonlyMap<string, string>): CheckpointStep {
  const calls = toolParts(message).map((part) => ({
    ref: refs.get(part.callID ?? part.id),
    tool: part.tool ?? "tool",
    args: JSON.stringify(part.state?.input ?? null),
    result: part.state?.status === "error" ? (part.state.error ?? "") : (part.state?.output ?? ""),
    failed: part.state?.status === "error",
  }));
  const said = message.parts
    .filter((p) => p.type === "text" && p.text)
    .map((p) => p.text as string)
    .join("\n");
  return said ? [{ ref: undefined, tool: "said", args: "", result: said, failed: false }, ...calls] : calls;
}

export interface CheckpointOutcome {
  /** Steps the checkpoint stands for (0: none). */
  readonly cut: number;
  readonly steps: number;
  readonly moved: boolean;
  readonly fits: boolean;
  /** Tokens of the live part (checkpoint + verbatim steps) as sent. */
  readonly tokens: number;
  readonly level: number;
  /** A dry run without refs: the request needs them (the cut moves, or its checkpoint has lines to write). */
  readonly needsRefs?: boolean;
}

/**
 * Replaces the live turn's first steps in `messages` by a checkpoint when the steps outgrow `budget` tokens (in
 * place; OpenCode's own message objects are not changed). `refs` are the stored results' refs by tool call id.
 */
export function applyCheckpoint(
  state: object,
  messages: HostMessage[],
  at: {
    turnId: string;
    requestIndex: number;
    budget: number;
    /** The room a request has for the live turn with no memory: a latest step larger than it is never cut. */
    fullRoom?: number;
    /** The stored results' refs; undefined: not read (every finished step counts as stored, lines get no refs). */
    refs: ReadonlyMap<string, string> | undefined;
    /** False: a finished step whose records are not stored yet may be cut too (its lines then have no ref yet). */
    requireStored?: boolean;
    /** Only plan: leave `messages` as they are. */
    dryRun?: boolean;
  },
): CheckpointOutcome | undefined {
  const { turnId, requestIndex, budget } = at;
  const refs = at.refs ?? new Map<string, string>();
  const request = messages[requestIndex];
  if (requestIndex < 0 || !request) return undefined;
  const { from, to } = stepRange(messages, requestIndex);
  const hosts = messages.slice(from, to);
  const memo = memoOf(state)?.turnId === turnId ? (memoOf(state) as CheckpointMemo) : undefined;
  const previousCut = memo ? Math.min(memo.cut, hosts.length) : 0;
  const anyStored = at.refs === undefined || at.requireStored === false;
  const steps = hosts.map((m, i) => {
    const complete = toolsDone(m);
    return {
      tokens: messageTokens(state, turnId, m, complete && i < hosts.length - 1),
      complete,
      stored: anyStored || toolParts(m).every((p) => refs.has(p.callID ?? p.id)),
    };
  });
  const calls = lazyCalls(hosts, refs);
  const stepsOf = calls.stepsOf;
  // A checkpoint sent without some refs is rendered afresh once they are stored (its lines then point at them).
  const sent = memo?.checkpoint;
  const grownFrom = sent?.missingRefs && at.refs && allStored(hosts.slice(0, sent.steps), refs) ? undefined : sent;
  // The checkpoint takes at most its share of the live budget before it folds coarser.
  const rendered = (cut: number) => growCheckpoint(grownFrom, cut, stepsOf, checkpointCap(budget));
  // The latest step's results become a line only when they fit a request of their own (else the turn stops, saying so).
  const latest = steps.at(-1);
  const latestCuttable = latest !== undefined && at.fullRoom !== undefined && latest.tokens <= at.fullRoom;
  const plan = planCut({ steps, previousCut, budget, latestCuttable, checkpointTokens: (cut) => rendered(cut).tokens });
  if (at.dryRun) {
    // The checkpoint as it would go: lines to write (a checkpoint rendered or grown) need the refs.
    if (plan.cut > 0) rendered(plan.cut);
    const needsRefs = plan.moved || calls.built() || (sent?.missingRefs ?? false);
    return { ...plan, steps: hosts.length, level: 0, needsRefs };
  }
  if (plan.cut === 0) {
    memos.set(state, { ...(memoOf(state) ?? {}), turnId, cut: 0, checkpoint: undefined });
    return { ...plan, steps: hosts.length, level: 0 };
  }
  const checkpoint = rendered(plan.cut);
  const missingRefs = at.refs === undefined ? (sent?.missingRefs ?? false) : !allStored(hosts.slice(0, plan.cut), refs);
  memos.set(state, {
    ...(memoOf(state) ?? {}),
    turnId,
    cut: plan.cut,
    checkpoint: { steps: plan.cut, level: checkpoint.level, data: checkpoint.data, missingRefs },
  });
  const part: HostPart = {
    id: `optchat-checkpoint-${turnId}`,
    messageID: request.info.id,
    sessionID: request.info.sessionID,
    type: "text",
    text: checkpoint.text,
    synthetic: true,
  };
  messages.splice(from, plan.cut);
  messages[requestIndex] = { ...request, parts: [...request.parts, part] };
  return { ...plan, steps: hosts.length, level: checkpoint.level };
}
