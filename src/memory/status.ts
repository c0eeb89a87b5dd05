import type { BudgetSettings } from "../compactor/budget.js";
import { ledgerExists } from "../store/compactor-calls.js";
import { connectClient } from "../store/db.js";
import { SCHEMA_VERSION } from "../store/migrate.js";
import { readStoreStatus, type StoreStatus } from "../store/status.js";
import { readSessionSpendToday, readTodaySpend, type SessionSpend, type TodaySpend } from "./cost.js";

export type { StoreStatus };

/**
 * The store's status on a dedicated short-lived connection (works on a database that is not migrated yet), with
 * today's compactor spend against `budget` once the ledger exists.
 */
export async function readStatus(
  databaseUrl: string,
  budget?: BudgetSettings,
): Promise<
  StoreStatus & { expectedSchemaVersion: number; compactorToday?: TodaySpend; compactorSessionsToday?: SessionSpend[] }
> {
  const client = await connectClient(databaseUrl, "optchat-status");
  try {
    const status = await readStoreStatus(client);
    // By the table, not a schema version: the ledger's migration number may still change when branches merge.
    const compactorToday = budget && (await ledgerExists(client)) ? await readTodaySpend(client, budget) : undefined;
    // The sessions that spent most today (issue 39: spend per session beside the total against the cap).
    const compactorSessionsToday =
      budget && compactorToday ? await readSessionSpendToday(client, budget.prices, { limit: 5 }) : undefined;
    return {
      ...status,
      expectedSchemaVersion: SCHEMA_VERSION,
      ...(compactorToday ? { compactorToday } : {}),
      ...(compactorSessionsToday ? { compactorSessionsToday } : {}),
    };
  } finally {
    await client.end().catch(() => {});
  }
}
