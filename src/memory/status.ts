import type { BudgetSettings } from "../compactor/budget.js";
import { isOptchatError, type OptchatError } from "../core/errors.js";
import { type SetupProblem, setupVerdict, type Verdict } from "../core/health.js";
import { ledgerExists } from "../store/compactor-calls.js";
import { connectClient } from "../store/db.js";
import { SCHEMA_VERSION } from "../store/migrate.js";
import { readStoreStatus, type StoreStatus } from "../store/status.js";
import { readSessionSpendToday, readTodaySpend, type SessionSpend, type TodaySpend } from "./cost.js";
import { type CompactorHealth, type HealthOptions, readCompactorHealth } from "./health.js";

export type { StoreStatus };

/**
 * The store's status on a dedicated short-lived connection (works on a database that is not migrated yet), with
 * today's compactor spend against `budget` once the ledger exists.
 */
export async function readStatus(databaseUrl: string, budget?: BudgetSettings): Promise<StoreWithSpend> {
  const client = await connectClient(databaseUrl, "optchat-status");
  try {
    return await readStatusOn(client, budget);
  } finally {
    await client.end().catch(() => {});
  }
}

async function readStatusOn(
  client: Awaited<ReturnType<typeof connectClient>>,
  budget?: BudgetSettings,
): Promise<StoreWithSpend> {
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
}

/** The store's status with today's compactor spend (in total against the cap, and by session). */
export type StoreWithSpend = StoreStatus & {
  expectedSchemaVersion: number;
  compactorToday?: TodaySpend;
  compactorSessionsToday?: SessionSpend[];
};

/** `optchat status`: the verdict first, then the store's status and the compactor's health it rests on. */
export type StatusReport =
  | {
      readonly setUp: true;
      readonly verdict: Verdict;
      readonly status: StoreWithSpend;
      readonly compactor: CompactorHealth;
    }
  | {
      readonly setUp: false;
      readonly verdict: Verdict;
      readonly status?: StoreWithSpend;
      /** The error that stopped the reading (database unreachable or missing). */
      readonly error?: OptchatError;
    };

/** Everything `optchat status` shows, on one short-lived connection; a setup problem is a verdict, not a throw. */
export async function readStatusReport(
  databaseUrl: string,
  budget?: BudgetSettings,
  options: HealthOptions = {},
): Promise<StatusReport> {
  let client: Awaited<ReturnType<typeof connectClient>>;
  try {
    client = await connectClient(databaseUrl, "optchat-status");
  } catch (error) {
    if (!isOptchatError(error, "DATABASE_UNAVAILABLE")) throw error;
    return { setUp: false, verdict: setupVerdict(setupProblemOf(error)), error };
  }
  try {
    const status = await readStatusOn(client, budget);
    if (status.schemaVersion < SCHEMA_VERSION || !status.jobQueueInstalled) {
      return {
        setUp: false,
        verdict: setupVerdict({ kind: "schema", version: status.schemaVersion, expected: SCHEMA_VERSION }),
        status,
      };
    }
    const compactor = await readCompactorHealth(client, {
      ...options,
      budgetCapReached: status.compactorToday?.capReached ?? null,
    });
    return { setUp: true, verdict: compactor.verdict, status, compactor };
  } finally {
    await client.end().catch(() => {});
  }
}

/** What a connection failure means for the person: no server, or a server without the database. */
export function setupProblemOf(error: OptchatError): SetupProblem {
  const details = error.details as { where?: string; sqlState?: string };
  if (details.sqlState === "3D000") {
    return { kind: "no-database", database: (details.where ?? "").split("/").slice(1).join("/") };
  }
  const cause = error.cause instanceof Error ? error.cause.message : "";
  return { kind: "unreachable", where: details.where ?? "?", reason: cause || error.message };
}
