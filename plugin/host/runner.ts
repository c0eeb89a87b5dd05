/**
 * What runs the plugin's side (plugin/transport/plugin-side.ts) gives its instance: the runner. OpenCode's own thread
 * (the loopback channel), the plugin's thread, or the local server for one OpenCode process; plugin/transport/ builds
 * it from the channel's `init`, so nothing in here asks where it runs.
 */
import { type Config, type Memory, openMemory } from "../../src/memory/index.js";
import type { RegisterClosable } from "../base/closing.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import type { PluginRunner } from "../base/identity.js";
import type { CompactorModel } from "../opencode/compactor-model.js";
import type { RememberedLimits } from "../request/model-limits.js";
import type { CompactorHandle } from "../turns/compactor-handle.js";
import type { EmbeddedWorker } from "./embedded-worker.js";

/** What a runner's compactor is made from. */
export interface CompactorContext {
  readonly memory: Memory;
  readonly config: ResolvedPluginConfig;
  readonly model: CompactorModel;
}

export interface Runner {
  readonly kind: PluginRunner;
  /** The environment the instance's settings come from (the OpenCode process's, also in the local server). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Opens the memory service; the local server (plugin/transport/local-server/server.ts) shares one per configuration. */
  openMemory(config: Config): Promise<Memory>;
  /** Registers the adapter to be flushed and closed when its runner stops (or OpenCode's side forwards a signal). */
  readonly register: RegisterClosable;
  /** The OpenCode process served, when it is not this one (the local server): the adapter's lease holder. */
  readonly hostPid?: number;
  /** Model limits the local server's earlier processes learned (plugin/request/model-limits.ts); none elsewhere. */
  readonly rememberedLimits?: RememberedLimits;
  /**
   * With the embedded worker on, the adapter's compactor in place of its own (`own` makes that one): the local server's
   * worker for the process's database, or the own one handing its queue to a local server that is starting
   * (plugin/transport/local-server/hand-off.ts). Absent: the adapter's own embedded worker.
   */
  readonly compactor?: (context: CompactorContext, own: () => EmbeddedWorker) => CompactorHandle;
}

/** A runner inside an OpenCode process (OpenCode's thread or the plugin's): its own pool, named after the process. */
export function ownProcessRunner(
  kind: Exclude<PluginRunner, "local server">,
  register: RegisterClosable,
  compactor?: Runner["compactor"],
): Runner {
  return {
    kind,
    env: process.env,
    openMemory: (config) => openMemory(config, { applicationName: `optchat-opencode-${process.pid}` }),
    register,
    ...(compactor ? { compactor } : {}),
  };
}
