/**
 * The request's real size in OpenCode 1.18.33 (issue 36 "Real sizing", docs/checkpoints.md): what OpenCode reported
 * for each step's input (its `tokens`), against what the plugin estimated for the messages of that request, fits the
 * instructions and tools a plugin cannot see and the provider's tokens per estimated token (src/core/request-sizing.ts).
 */
import {
  estimateTokens,
  type FittedSize,
  fitRequestSize,
  type SizeSample,
  withSample,
} from "../../src/memory/index.js";
import type { HostMessage } from "../opencode/messages.js";
import { messageText } from "../opencode/messages.js";

/** What the session's requests sent and what the provider counted for them, per session state. */
interface SizeMemo {
  /** The last message of the session's previous request as sent, and the estimate of all its messages' tokens. */
  sent?: { lastMessageId: string; messagesTokens: number };
  /** The request whose report was sampled last (each is sampled once). */
  sampled?: string;
  samples: SizeSample[];
  fitted?: FittedSize;
}

const memos = new WeakMap<object, SizeMemo>();

/**
 * The latest measured size per model and agent, across the process's sessions: a session's first request has no usage
 * of its own yet, and the same agent on the same model sends the same instructions and tools, counted alike.
 */
const lastMeasured = new Map<string, FittedSize>();

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
export function rememberedSize(messages: readonly HostMessage[]): FittedSize | undefined {
  const key = overheadKey(messages);
  return key ? lastMeasured.get(key) : undefined;
}

/** Tokens the provider counted for a message's request (input, cached or not), when OpenCode reported them. */
function reportedInput(message: HostMessage): number | undefined {
  const tokens = (message.info as { tokens?: { input?: number; cache?: { read?: number; write?: number } } }).tokens;
  const total = (tokens?.input ?? 0) + (tokens?.cache?.read ?? 0) + (tokens?.cache?.write ?? 0);
  return total > 0 ? total : undefined;
}

/**
 * The session's requests as the provider counts them: the instructions and tools (overhead) and the provider's tokens
 * per estimated token of the messages (ratio), fitted through its last requests' reports; with one report only, the
 * ratio is 1 and the overhead is that report less the estimate. Undefined before any report of a request this
 * process sent (then the caller estimates).
 */
export function measuredSize(state: object, messages: readonly HostMessage[]): FittedSize | undefined {
  const memo = memos.get(state);
  const sent = memo?.sent;
  if (!memo || !sent) return memo?.fitted;
  for (let i = messages.length - 1; i > 0; i--) {
    const message = messages[i] as HostMessage;
    if (message.info.role !== "assistant") continue;
    const reported = reportedInput(message);
    if (reported === undefined) continue;
    // The latest report must answer the request this process sent last (else it measures something else).
    if ((messages[i - 1] as HostMessage).info.id !== sent.lastMessageId || memo.sampled === sent.lastMessageId) break;
    memo.sampled = sent.lastMessageId;
    memo.samples = withSample(memo.samples, { estimated: sent.messagesTokens, reported });
    memo.fitted = fitRequestSize(memo.samples) ?? {
      ratio: 1,
      overhead: Math.max(0, reported - sent.messagesTokens),
    };
    const key = overheadKey(messages);
    if (key) lastMeasured.set(key, memo.fitted);
    break;
  }
  return memo.fitted;
}

/** Notes what this request sends (its messages as laid out), for the next request's measure. */
export function noteSent(state: object, messages: readonly HostMessage[]): void {
  const last = messages.at(-1);
  if (!last) return;
  const messagesTokens = messages.reduce((sum, m) => sum + estimateTokens(messageText(m)), 0);
  const memo = memos.get(state) ?? { samples: [] };
  memo.sent = { lastMessageId: last.info.id, messagesTokens };
  memos.set(state, memo);
}
