/**
 * A session's request slice: what its requests were built from, owned by plugin/request/ (the transform writes it, and
 * the notes OpenCode's hooks bring go through here). The session's state holds it (plugin/turns/session-state.ts
 * `request`), seen there only as `RequestSliceView`.
 */
import type { AssembledContext } from "../../src/memory/index.js";
import type { SessionState } from "../turns/session-state.js";
import type { RequestChecks } from "./checks.js";
import type { CacheEpoch } from "./epoch-layout.js";
import type { PreparedTurn } from "./prepared-context.js";

export class RequestSlice {
  /** The session's next request is OpenCode's own compaction (`experimental.session.compacting`). */
  compacting = false;
  /** The system prompt's size, measured at `experimental.chat.system.transform`, for the next request's budget. */
  systemTokens: number | undefined = undefined;
  /** An actionable error for the current request (strict readiness, budget): OpenCode's side raises it at chat.params. */
  pendingError: string | undefined = undefined;
  /**
   * The tokens the request the transform just built needs, when the model's limits were unknown to it (the lookup
   * failed or timed out) and it assumed a window: `chat.params` checks it against the limit OpenCode passes there.
   */
  unsized: { tokens: number; assumedWindow: number } | undefined = undefined;
  /** The last request's outcome, for memory_inspect. */
  lastInjection: Record<string, unknown> | undefined = undefined;
  /** What the latest admitted turn's assemblies read before knowing their budget (plugin/request/prepared-context.ts). */
  prepared: PreparedTurn | undefined = undefined;
  /** The last assembly, which memory may hand back to the later steps of the same turn (`AssembleFrom.previous`). */
  assembled: { turnId: string; context: AssembledContext } | undefined = undefined;
  /** The session's cache epoch: the memory and texts its requests re-send byte for byte (plugin/request/epoch-layout.ts). */
  epoch: CacheEpoch | undefined = undefined;
  /** The scope and retention epoch the cache epoch's memory was assembled under (it is re-sent only while current). */
  epochSnapshot: { scopeId: string; retentionEpoch: number } | undefined = undefined;

  clearError(): void {
    this.pendingError = undefined;
  }

  forgetHistory(): void {
    this.assembled = undefined;
    this.prepared = undefined;
    this.epoch = undefined;
  }

  forgetEpoch(): void {
    this.epoch = undefined;
  }

  /** The checks `chat.params` decides from, as the last transform left them. */
  checks(): RequestChecks {
    return { pendingError: this.pendingError, unsized: this.unsized };
  }

  /** What OpenCode's side decided at `chat.params` (plugin/transport/remote-hooks.ts, the one place that decides). */
  noteChecks(checks: RequestChecks): void {
    this.pendingError = checks.pendingError;
    this.unsized = checks.unsized;
  }

  noteCompacting(): void {
    this.compacting = true;
  }

  noteSystemTokens(tokens: number): void {
    this.systemTokens = Math.max(this.systemTokens ?? 0, tokens);
  }
}

/**
 * The request slice of a session's state: every state's slice is a RequestSlice (plugin/host/adapter.ts makes the
 * states with `newRequestSlice`), seen by the turns' parts only as its view.
 */
export function requestSlice(state: SessionState): RequestSlice {
  return state.request as RequestSlice;
}

export const newRequestSlice = (): RequestSlice => new RequestSlice();
