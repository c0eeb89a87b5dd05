// The memory service's public surface for hosts (the OpenCode plugin imports only this module).

export { WORKER_RUNS_IN } from "../compactor/heartbeat.js";
export { ANTHROPIC_DEFAULT_MODEL } from "../compactor/providers/anthropic.js";
export { OPENAI_DEFAULT_MODEL } from "../compactor/providers/openai.js";
export type { SummarizerSettings } from "../compactor/providers/provider.js";
export { AUTO, createSummarizer } from "../compactor/registry.js";
export type { Summarizer } from "../compactor/summarizer.js";
// Execution checkpoints (issue 36): where the live turn is cut and what its lines say, for the host's request hook.
export { checkpointCap, liveBudget, planCut } from "../core/checkpoint-cut.js";
export {
  type CheckpointStep,
  growCheckpoint,
  renderCheckpoint,
  type SentCheckpoint,
} from "../core/checkpoint-lines.js";
export { availableMemoryTokens, escapeMemoryText, estimateTokens, fixedRequestTokens } from "../core/context.js";
export { isOptchatError, OptchatError } from "../core/errors.js";
export { type FittedSize, fitRequestSize, type SizeSample, withSample } from "../core/request-sizing.js";
export { didYouMean, nearest } from "../core/suggest.js";
export type { Session } from "../store/sessions.js";
export type { Turn } from "../store/turns.js";
export {
  type AssembledContext,
  type AssembleFrom,
  type Omitted,
  omittedText,
  type PreparedContext,
} from "./assembly.js";
export {
  budgetSettingsOf,
  type Config,
  integerFrom,
  redactUrl,
  resolveConfig,
  resolveSettings,
  SETTINGS,
  type SettingName,
  summarizerSettingsOf,
  zeroOrIntegerFrom,
} from "./config.js";
export type { HostSupport, Injection, SessionHealth } from "./host.js";
export type { RecordTally } from "./import.js";
export type { ZoomAnswer } from "./retrieval.js";
export type { IngestEvent } from "./schemas.js";
export { type Memory, openMemory } from "./service.js";
export type { SearchAnswer } from "./shared.js";
export type { CompactorEvent, RunningCompactor } from "./worker.js";

// Loaded when first called: the compactor worker (its jobs, publication, summarizing, retention) and the inspection's
// status queries are ~40 modules a host process imports at start and most `opencode run`s never use (issue 9 item 2:
// the plugin's import is on OpenCode's start-up path, docs/opencode-notes.md "What a run costs").
export const startWorker: typeof import("./worker.js").startWorker = async (...args) =>
  (await import("./worker.js")).startWorker(...args);
export const inspectStoredSession: typeof import("./inspect.js").inspectStoredSession = async (...args) =>
  (await import("./inspect.js")).inspectStoredSession(...args);
export const inspectText = async (
  ...args: Parameters<typeof import("./inspect-text.js").inspectText>
): Promise<string> => (await import("./inspect-text.js")).inspectText(...args);
