// The memory service's public surface for hosts (the OpenCode plugin imports only this module).
export { ANTHROPIC_DEFAULT_MODEL } from "../compactor/providers/anthropic.js";
export { OPENAI_DEFAULT_MODEL } from "../compactor/providers/openai.js";
export type { SummarizerSettings } from "../compactor/providers/provider.js";
export { AUTO, createSummarizer } from "../compactor/registry.js";
export type { Summarizer } from "../compactor/summarizer.js";
export { availableMemoryTokens, escapeMemoryText, estimateTokens, fixedRequestTokens } from "../core/context.js";
export { isOptchatError, OptchatError } from "../core/errors.js";
export type { Session } from "../store/sessions.js";
export type { Turn } from "../store/turns.js";
export type { AssembledContext, PreparedContext } from "./assembly.js";
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
} from "./config.js";
export type { HostSupport, Injection, SessionHealth } from "./host.js";
export type { RecordTally } from "./import.js";
export { inspectStoredSession } from "./inspect.js";
export type { ZoomAnswer } from "./retrieval.js";
export type { IngestEvent } from "./schemas.js";
export { type Memory, openMemory } from "./service.js";
export type { SearchAnswer } from "./shared.js";
export { type CompactorEvent, type RunningCompactor, startWorker } from "./worker.js";
