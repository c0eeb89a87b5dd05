/**
 * What `chat.params` decides for a request, from what its transform left: the actionable error the transform recorded
 * (strict readiness, a budget the request cannot fit), or a request sized for an assumed window that the model's real
 * window, which OpenCode passes only to `chat.params`, does not hold. One decision, run by the adapter on its session
 * state, and by the plugin's main thread on the copy the thread sends back with each transformed request, so that
 * `chat.params` is answered in OpenCode's thread without a trip to the plugin's thread (plugin/transport/remote-hooks.ts). No
 * imports beyond the retry triggers: OpenCode's thread loads this module.
 */
import { withoutRetryTriggers } from "../base/retry-triggers.js";

/** The request checks' state of one session, as the transform left it (plugin/turns/session-state.ts holds the same fields). */
export interface RequestChecks {
  /** The error `chat.params` raises, until the session's next transform or idle. */
  pendingError: string | undefined;
  /**
   * Memory was sized for an assumed window (OpenCode did not answer with the model's limits in time, or they were
   * remembered from another process: plugin/request/model-limits.ts): `chat.params` compares the request with the real one, once.
   */
  unsized: { readonly tokens: number; readonly assumedWindow: number } | undefined;
}

/** The model as OpenCode 1.18.33 passes it to `chat.params` (v2-shaped: `provider.info` is absent). */
export interface ParamsModel {
  readonly id?: string;
  readonly providerID?: string;
  readonly limit?: { readonly context?: number; readonly output?: number };
}

/** The message `chat.params` raises for a request memory cannot serve: what failed and the setting that changes it. */
export function actionableError(code: string, message: string): string {
  if (code === "MEMORY_NOT_READY") {
    return `optchat: memory is not ready for this request (${message}). The compactor may be stopped or failing: check \`optchat status\` or the memory_inspect tool. To continue without waiting, set OPTCHAT_READINESS=partial (the request then says what is missing), or raise OPTCHAT_READINESS_WAIT_MS.`;
  }
  if (code === "CHECKPOINT_TOO_LARGE") {
    return `optchat: this request does not fit the model's context window (${message}). Nothing was lost: every message and tool output of this turn is stored, and the next turn is shown where this one stopped. To go on, send "continue" and ask for a smaller piece of that output (fewer lines, a filter), or use a model with a larger context window.`;
  }
  return `optchat: this request does not fit the model's context window (${message}). Nothing was lost: every message of this session is stored. Use a model with a larger context window, or lower OPTCHAT_RESERVE_TOKENS / OPTCHAT_TOOLS_TOKENS if they are set too high.`;
}

/**
 * `chat.params` of a request of the session (not the title's: it runs beside the turn's own requests, often with
 * another model): checks an unsized request against the model's window (once: OpenCode calls `chat.params` per HTTP
 * attempt, and a refusal then stands for the retries), and returns the refusal to throw, without retry triggers
 * (plugin/base/retry-triggers.ts), or undefined.
 */
export function checkRequestParams(checks: RequestChecks, model: ParamsModel | undefined): string | undefined {
  const unsized = checks.unsized;
  const window = model?.limit?.context;
  if (model?.providerID && model.id && unsized && window) {
    checks.unsized = undefined;
    if (checks.pendingError === undefined && unsized.tokens > window) {
      checks.pendingError = actionableError(
        "BUDGET_EXCEEDED",
        `the request needs about ${unsized.tokens} tokens (memory sized for an assumed window of ${unsized.assumedWindow}: OpenCode had not confirmed the model's limits when the request was prepared); the window of ${model.providerID}/${model.id} is ${window}`,
      );
    }
  }
  return checks.pendingError === undefined ? undefined : withoutRetryTriggers(checks.pendingError);
}
