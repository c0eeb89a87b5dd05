import { listScopeSummaries, type ScopeSummary } from "../store/scopes.js";
import type { Memory } from "./service.js";

export type { ScopeSummary };

/** Every scope of the memory (isolated ones only when asked), latest activity first: for `optchat scopes`. */
export async function listScopes(memory: Memory, options: { includeIsolated?: boolean } = {}): Promise<ScopeSummary[]> {
  return await listScopeSummaries(memory.pool, { includeIsolated: options.includeIsolated ?? false });
}
