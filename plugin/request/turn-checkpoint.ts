/**
 * Execution checkpoints in OpenCode 1.18.33's request (issue 36, docs/checkpoints.md): the live turn's steps are the
 * assistant messages after the person's request message, one per model step (a parallel batch is one message); when
 * they outgrow their budget, the first of them are taken out of the request and a checkpoint block (src/core/
 * checkpoint-lines.ts) is appended to the request message, after the person's own words, which stay verbatim. Where
 * to cut is decided by src/core/checkpoint-cut.ts; the lines point at the stored tool results (memory.host
 * turnResultRefs), so each step is one memory_zoom away from its exact output.
 *
 * Also the request's real size: what OpenCode reported for the previous step's input (its `tokens`), against what
 * this module estimated for the messages of that request, measures the instructions and tools a plugin cannot see.
 */
import { type CheckpointStep, estimateTokens, planCut, renderCheckpoint } from "../../src/memory/index.js";
import type { HostMessage, HostPart } from "../opencode/messages.js";
import { messageText } from "../opencode/messages.js";

/** The checkpoint of a session's live turn and what its last request sent, per session state. */
interface CheckpointMemo {
  turnId: string;
  cut: number;
  /** The latest measured instructions and tools (they change little between requests of a session). */
  overhead?: number;
  /** The last message of the session's previous request as sent, and the estimate of all its messages' tokens. */
  sent?: { lastMessageId: string; messagesTokens: number };
}

const memos = new WeakMap<object, CheckpointMemo>();

/**
 * The latest measured instructions and tools per model and agent, across the process's sessions: a session's first
 * request has no usage of its own yet, and the same agent on the same model sends the same instructions and tools.
 */
const lastMeasured = new Map<string, number>();

function overheadKey(messages: readonly HostMessage[]): string | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const info = (messages[i] as HostMessage).info;
    if (info.role !== "user") continue;
    const providerID = info.model?.providerID ?? info.providerID;
    const modelID = info.model?.modelID ?? info.modelID;
    return providerID && modelID && info.agent ? `${providerID}/${modelID}/${info.agent}` : undefined;
  }
  return undefined;
}

/**
 * What another session of this process measured for the same model and agent, for a session that has no measurement
 * of its own yet (then it sizes its first request with it, as an estimate: an estimate alone never refuses).
 */
export function rememberedOverhead(messages: readonly HostMessage[]): number | undefined {
  const key = overheadKey(messages);
  return key ? lastMeasured.get(key) : undefined;
}

function memoOf(state: object): CheckpointMemo | undefined {
  return memos.get(state);
}

/** Tokens the provider counted for a message's request (input, cached or not), when OpenCode reported them. */
function reportedInput(message: HostMessage): number | undefined {
  const tokens = (message.info as { tokens?: { input?: number; cache?: { read?: number; write?: number } } }).tokens;
  const total = (tokens?.input ?? 0) + (tokens?.cache?.read ?? 0) + (tokens?.cache?.write ?? 0);
  return total > 0 ? total : undefined;
}

/**
 * The instructions and tools of the session's requests as the provider counted them: the previous request's reported
 * input less this module's estimate of the messages it carried. Undefined when the previous request is not the one
 * the last reported step answered (then the caller estimates).
 */
export function measuredOverhead(state: object, messages: readonly HostMessage[]): number | undefined {
  const memo = memoOf(state);
  const sent = memo?.sent;
  if (!memo || !sent) return memo?.overhead;
  for (let i = messages.length - 1; i > 0; i--) {
    const message = messages[i] as HostMessage;
    if (message.info.role !== "assistant") continue;
    const reported = reportedInput(message);
    if (reported === undefined) continue;
    if ((messages[i - 1] as HostMessage).info.id !== sent.lastMessageId) break;
    memo.overhead = Math.max(0, reported - sent.messagesTokens);
    const key = overheadKey(messages);
    if (key) lastMeasured.set(key, memo.overhead);
    break;
  }
  return memo.overhead;
}

/** Notes what this request sends (its messages as laid out), for the next request's measure. */
export function noteSent(state: object, turnId: string, messages: readonly HostMessage[]): void {
  const last = messages.at(-1);
  if (!last) return;
  const messagesTokens = messages.reduce((sum, m) => sum + estimateTokens(messageText(m)), 0);
  const memo = memoOf(state) ?? { turnId, cut: 0 };
  memo.sent = { lastMessageId: last.info.id, messagesTokens };
  memos.set(state, memo);
}

/** The turn's steps: the run of assistant messages right after the request message. */
function stepRange(messages: readonly HostMessage[], requestIndex: number): { from: number; to: number } {
  let to = requestIndex + 1;
  while (to < messages.length && (messages[to] as HostMessage).info.role === "assistant") to += 1;
  return { from: requestIndex + 1, to };
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
    refs: ReadonlyMap<string, string>;
    /** False: a finished step whose records are not stored yet may be cut too (its lines then have no ref yet). */
    requireStored?: boolean;
    /** Only plan: leave `messages` as they are. */
    dryRun?: boolean;
  },
): CheckpointOutcome | undefined {
  const { turnId, requestIndex, budget, refs } = at;
  const request = messages[requestIndex];
  if (requestIndex < 0 || !request) return undefined;
  const { from, to } = stepRange(messages, requestIndex);
  const hosts = messages.slice(from, to);
  const memo = memoOf(state);
  const previousCut = memo?.turnId === turnId ? Math.min(memo.cut, hosts.length) : 0;
  const steps = hosts.map((m) => {
    const tools = toolParts(m);
    return {
      tokens: estimateTokens(messageText(m)),
      complete: tools.every((p) => p.state?.status === "completed" || p.state?.status === "error"),
      stored: at.requireStored === false || tools.every((p) => refs.has(p.callID ?? p.id)),
    };
  });
  const calls = hosts.map((m) => stepCalls(m, refs));
  // The checkpoint takes at most half of the live budget before it folds coarser.
  const rendered = (cut: number) => renderCheckpoint(calls.slice(0, cut), Math.floor(budget / 2));
  // The latest step's results become a line only when they fit a request of their own (else the turn stops, saying so).
  const latest = steps.at(-1);
  const latestCuttable = latest !== undefined && at.fullRoom !== undefined && latest.tokens <= at.fullRoom;
  const plan = planCut({ steps, previousCut, budget, latestCuttable, checkpointTokens: (cut) => rendered(cut).tokens });
  if (at.dryRun) return { ...plan, steps: hosts.length, level: 0 };
  memos.set(state, { ...(memo ?? {}), turnId, cut: plan.cut });
  if (plan.cut === 0) return { ...plan, steps: hosts.length, level: 0 };
  const checkpoint = rendered(plan.cut);
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
