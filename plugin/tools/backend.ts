/**
 * What the memory tools need of the adapter (plugin/host/adapter.ts implements it): the memory service, the settings,
 * the turn a tool call runs in, and the process's state for memory_inspect. An interface here, so that the tools sit
 * below the adapter (docs/architecture.md "Layers").
 */
import type { Memory, Turn } from "../../src/memory/index.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import type { SessionState } from "../turns/session-state.js";

export interface AdapterStatus {
  readonly holder: string;
  readonly startedAt: Date;
  readonly worker: string;
  /** What made the embedded worker start (it starts when needed, see plugin/host/embedded-worker.ts). */
  readonly workerStartReason: string | undefined;
  readonly workerError: string | undefined;
  readonly workerLastEvent: string | undefined;
  readonly problems: number;
  readonly lastProblem: string | undefined;
}

export interface ToolsBackend {
  /** The host name its sessions have in memory: V2's "opencode-v2"; unset, V1's (plugin/base/identity.ts HOST). */
  readonly host?: string;
  readonly memory: Memory;
  readonly config: ResolvedPluginConfig;
  /** The turn a tool call runs in, at its pinned snapshot (plugin/host/adapter.ts `toolTurn`). */
  toolTurn(hostSessionId: string, assistantMessageId?: string): Promise<Turn>;
  sessionOf(hostSessionId: string): SessionState | undefined;
  status(): AdapterStatus;
}
