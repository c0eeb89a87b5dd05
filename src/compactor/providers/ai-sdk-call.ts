import type { LanguageModel, ModelMessage, SystemModelMessage, TextPart } from "ai";
import type { SummaryPrompt } from "../../core/summary.js";
import { type CallUsage, type FailureKind, SummarizerError, type SummaryAnswer } from "../summarizer.js";

/**
 * One compactor call through the Vercel AI SDK (ai 6), shared by the Anthropic, OpenAI and OpenAI-compatible
 * providers. Streaming, at temperature 0, with the SDK's own retries off: seed 002 §4.1 wants a fixed, short retry of
 * the node (the worker reschedules it, after the provider's Retry-After when it sent one), not exponential backoff
 * inside a call while the next turn waits.
 */
export interface AiSdkCall {
  readonly model: LanguageModel;
  readonly identity: string;
  /** The first user message's parts: the context blocks (with any provider marks) and the step. */
  readonly userParts: readonly TextPart[];
  /** Provider options of the system prompt (Anthropic: its cache mark); without them it is sent as `system`. */
  readonly systemOptions?: Record<string, Record<string, unknown>>;
  readonly prompt: SummaryPrompt;
  readonly providerOptions?: Record<string, Record<string, string | number | boolean | null>>;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  /** Told when the first part of the answer arrives (prefix-gate.ts). */
  readonly onResponse?: () => void;
  /** Hint for the settings to check, appended to errors. */
  readonly settingsHint: string;
}

/** A 512-byte line is ~150 tokens; room for a wordy first try and for models that think before answering. */
const MAX_OUTPUT_TOKENS = 2048;
/** The longest Retry-After we wait for before trying a node again (a provider asking for hours is a config problem). */
const MAX_RETRY_AFTER_MS = 15 * 60 * 1000;

export async function callAiSdk(call: AiSdkCall): Promise<SummaryAnswer> {
  const { streamText } = await import("ai");
  if (call.signal?.aborted) throw new SummarizerError(`${call.identity}: aborted before the call`, { kind: "aborted" });
  const timeout = AbortSignal.timeout(call.timeoutMs);
  const abortSignal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
  const messages: ModelMessage[] = [
    { role: "user", content: [...call.userParts] },
    ...call.prompt.followUps.map(
      (m) => ({ role: m.role === "assistant" ? "assistant" : "user", content: m.content }) as ModelMessage,
    ),
  ];
  let text = "";
  let failure: unknown;
  let finishReason = "other";
  let usage: CallUsage | undefined;
  try {
    const result = streamText({
      model: call.model,
      system: call.systemOptions
        ? ({ role: "system", content: call.prompt.system, providerOptions: call.systemOptions } as SystemModelMessage)
        : call.prompt.system,
      messages,
      temperature: 0,
      maxOutputTokens: MAX_OUTPUT_TOKENS,
      maxRetries: 0,
      abortSignal,
      ...(call.providerOptions ? { providerOptions: call.providerOptions } : {}),
      // Errors arrive as stream parts below; the default handler would print them to stderr.
      onError: () => {},
    });
    for await (const part of result.fullStream) {
      if (part.type !== "start" && part.type !== "start-step") call.onResponse?.();
      if (part.type === "text-delta") text += part.text;
      else if (part.type === "error") failure ??= part.error;
      else if (part.type === "abort") failure ??= new Error("aborted");
      else if (part.type === "finish") {
        finishReason = part.finishReason;
        usage = usageOf(part.totalUsage);
      }
    }
  } catch (error) {
    failure ??= error;
  } finally {
    call.onResponse?.();
  }
  if (failure !== undefined)
    throw describeFailure(call, failure, { timedOut: timeout.aborted, stopped: call.signal?.aborted });
  return {
    text,
    finishReason,
    usage: usage ?? { inputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, outputTokens: 0 },
  };
}

function usageOf(usage: {
  inputTokens?: number;
  outputTokens?: number;
  inputTokenDetails?: { cacheReadTokens?: number; cacheWriteTokens?: number };
}): CallUsage {
  return {
    inputTokens: usage.inputTokens ?? 0,
    cacheReadTokens: usage.inputTokenDetails?.cacheReadTokens ?? 0,
    cacheWriteTokens: usage.inputTokenDetails?.cacheWriteTokens ?? 0,
    outputTokens: usage.outputTokens ?? 0,
  };
}

interface ApiCallErrorShape {
  readonly statusCode?: number;
  readonly responseHeaders?: Record<string, string>;
  readonly responseBody?: string;
  readonly url?: string;
  readonly message: string;
}

function isApiCallError(error: unknown): error is ApiCallErrorShape {
  // APICallError.isInstance without importing the SDK eagerly: the marker the SDK sets on its errors.
  return typeof error === "object" && error !== null && Symbol.for("vercel.ai.error.AI_APICallError") in error;
}

/** The error a failed call becomes: its kind (for the ledger and the retry), the provider's words, what to check. */
export function describeFailure(
  call: Pick<AiSdkCall, "identity" | "timeoutMs" | "settingsHint">,
  error: unknown,
  state: { timedOut: boolean; stopped: boolean | undefined },
): SummarizerError {
  if (state.stopped)
    return new SummarizerError(`${call.identity}: the call was aborted`, { kind: "aborted", cause: error });
  if (state.timedOut) {
    return new SummarizerError(
      `${call.identity}: no complete answer within ${call.timeoutMs} ms (OPTCHAT_SUMMARIZER_TIMEOUT_MS); the node is tried again`,
      { kind: "timeout", cause: error },
    );
  }
  if (isApiCallError(error) && error.statusCode !== undefined) {
    const status = error.statusCode;
    const kind = kindOfStatus(status);
    const retryAfterMs = retryAfterOf(error.responseHeaders ?? {});
    const body = excerpt(error.responseBody ?? error.message);
    const hint =
      kind === "auth"
        ? "The provider refused the credentials. "
        : kind === "not_found"
          ? "The URL or the model name is wrong. "
          : kind === "rate_limited" || kind === "overloaded" || kind === "server"
            ? `The node is tried again${retryAfterMs !== undefined ? ` after the provider's Retry-After (${Math.ceil(retryAfterMs / 1000)} s)` : ""}. `
            : "";
    return new SummarizerError(
      `${call.identity}: ${error.url ?? "the provider"} answered HTTP ${status}: ${body}. ${hint}${call.settingsHint}`,
      { kind, status, cause: error, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) },
    );
  }
  return new SummarizerError(`${call.identity}: ${networkReason(error)}. ${call.settingsHint}`, {
    kind: "network",
    cause: error,
  });
}

function kindOfStatus(status: number): FailureKind {
  if (status === 429) return "rate_limited";
  if (status === 529) return "overloaded";
  if (status >= 500) return "server";
  if (status === 401 || status === 403) return "auth";
  if (status === 404) return "not_found";
  if (status === 408) return "timeout";
  return "bad_request";
}

/** `retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date (RFC 9110 §10.2.3). */
export function retryAfterOf(headers: Record<string, string>, now = Date.now()): number | undefined {
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  const ms = Number(lower["retry-after-ms"]);
  if (lower["retry-after-ms"] !== undefined && Number.isFinite(ms) && ms >= 0) return Math.min(ms, MAX_RETRY_AFTER_MS);
  const value = lower["retry-after"];
  if (value === undefined) return undefined;
  const seconds = Number(value);
  if (value.trim() !== "" && Number.isFinite(seconds) && seconds >= 0)
    return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(value);
  return Number.isFinite(date) ? Math.min(Math.max(0, date - now), MAX_RETRY_AFTER_MS) : undefined;
}

/** fetch hides the socket error (ECONNREFUSED, ENOTFOUND, ...) in `cause`; that is the part worth showing. */
function networkReason(error: unknown): string {
  const outer = error instanceof Error ? error.message : String(error);
  let cause = (error as { cause?: unknown } | null)?.cause as
    | { code?: string; message?: string; cause?: unknown }
    | undefined;
  for (let depth = 0; cause && depth < 3; depth++) {
    if (cause.code) return `cannot reach the provider: ${cause.code} (${cause.message ?? outer})`;
    cause = cause.cause as typeof cause;
  }
  return `cannot reach the provider: ${outer}`;
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  if (flat.length === 0) return "(empty body)";
  return flat.length > 300 ? `${flat.slice(0, 300)} ...` : flat;
}
