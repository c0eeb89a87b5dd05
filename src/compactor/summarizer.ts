import type { SummaryPrompt } from "../core/summary.js";

/**
 * The seam between the compactor and a model. A summarizer answers one prompt (src/core/summary.ts: the system
 * prompt, the `<chat>` context in cache-stable blocks, the step, and in retries the earlier answers and feedback) with
 * one line and what the call cost. Providers live in src/compactor/providers/, one file each, listed in registry.ts.
 */
export interface Summarizer {
  /** Stored on every node it writes, e.g. "fake-extractive/1" or "anthropic:claude-haiku-4-5". */
  readonly identity: string;
  /** The registry name it came from ("anthropic", "openai", "openai-compatible", "fake"); the ledger's provider. */
  readonly provider: string;
  /** The model name as the provider knows it (the ledger's model, and the price table's key). */
  readonly model: string;
  /** Largest request, in UTF-8 bytes, it accepts; larger messages are chunked (never clipped). */
  readonly windowBytes: number;
  complete(prompt: SummaryPrompt, options?: CallOptions): Promise<SummaryAnswer>;
}

export interface CallOptions {
  readonly signal?: AbortSignal;
  /**
   * Stable per tree: consecutive calls of one tree share the longest prefix, and providers that route by a key (OpenAI's
   * prompt_cache_key) send them where that prefix is cached.
   */
  readonly cacheKey?: string;
  /** Called once the provider has begun answering (or the call ended): its prefix is then in the cache. */
  readonly onResponse?: () => void;
}

/** Tokens of one call as the provider reported them (the fake estimates them). */
export interface CallUsage {
  /** Every input token: uncached + read from the cache + written to it. */
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
  readonly outputTokens: number;
}

export interface SummaryAnswer {
  readonly text: string;
  readonly usage: CallUsage;
  /** The AI SDK's unified reason: stop, length, content-filter, error, other. */
  readonly finishReason: string;
}

export const NO_USAGE: CallUsage = Object.freeze({
  inputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  outputTokens: 0,
});

/**
 * Why a call failed, for the ledger's outcome and for when to try again: `rate_limited` (429), `overloaded` (529),
 * `server` (other 5xx), `timeout`, `network` (no answer at all), `auth` (401/403), `not_found` (404: URL or model
 * name), `bad_request` (other 4xx), `refusal`, `empty`, `invalid` (no usable line after every try), `aborted` (the
 * job was stopped), `config` (settings that cannot work).
 */
export type FailureKind =
  | "rate_limited"
  | "overloaded"
  | "server"
  | "timeout"
  | "network"
  | "auth"
  | "not_found"
  | "bad_request"
  | "refusal"
  | "empty"
  | "invalid"
  | "aborted"
  | "config";

export class SummarizerError extends Error {
  readonly kind: FailureKind;
  /** The provider's Retry-After, when it sent one: the node is not tried again before it. */
  readonly retryAfterMs: number | undefined;
  readonly status: number | undefined;

  constructor(
    message: string,
    options: { kind?: FailureKind; retryAfterMs?: number; status?: number; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SummarizerError";
    this.kind = options.kind ?? "invalid";
    this.retryAfterMs = options.retryAfterMs;
    this.status = options.status;
  }
}

/** The failure kind of any error a call can throw (a plain Error is reported as `invalid`). */
export function failureKindOf(error: unknown): FailureKind {
  return error instanceof SummarizerError ? error.kind : "invalid";
}
