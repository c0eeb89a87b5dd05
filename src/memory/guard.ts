import { type RetryPolicy, withRetry } from "../store/db.js";
import type { HostSupport } from "./host.js";
import type { Memory } from "./service.js";

/**
 * Service calls that must not run twice after a broken connection: each inserts a diagnostic row, and a COMMIT whose
 * answer was lost may have landed. Every other call is idempotent by design (ingestion by finalization key, admission
 * returns the admitted turn, an outcome keeps its first value, sessions are found by host id, leases keep their fence
 * for the same holder, reads), so it is retried while the database is unavailable.
 */
const NOT_IDEMPOTENT = new Set<string>(["recordInjection", "reportProblem"]);

/** Calls that are not database operations. */
const UNGUARDED = new Set<string>(["close"]);

/**
 * The service API as callers see it: every call goes through the one retry helper (`withRetry`, src/store/db.ts), so
 * a PostgreSQL restart or a dropped connection is retried for up to `policy.unavailableRetryMs`
 * (OPTCHAT_DATABASE_RETRY_MS) when the call is idempotent, and otherwise surfaces as DATABASE_UNAVAILABLE (naming the
 * server, the fix and the setting) instead of a raw driver error (57P03, "Connection terminated unexpectedly",
 * ECONNREFUSED, ECONNRESET). Conflicts are retried inside the store's transactions already.
 */
export function guardMemory(memory: Memory, policy: RetryPolicy): Memory {
  return Object.freeze({ ...guardMethods(memory, policy), host: Object.freeze(guardMethods(memory.host, policy)) });
}

function guardMethods<T extends Memory | HostSupport>(target: T, policy: RetryPolicy): T {
  const guarded: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(target)) {
    if (typeof value !== "function" || UNGUARDED.has(name)) {
      guarded[name] = value;
      continue;
    }
    const method = value as (...args: unknown[]) => Promise<unknown>;
    const idempotent = !NOT_IDEMPOTENT.has(name);
    guarded[name] = (...args: unknown[]) =>
      withRetry(() => method.apply(target, args), { idempotent, policy, conflictAttempts: 1 });
  }
  return guarded as T;
}
