import { connectClient } from "../store/db.js";
import { SCHEMA_VERSION } from "../store/migrate.js";
import { readStoreStatus, type StoreStatus } from "../store/status.js";

export type { StoreStatus };

/** The store's status on a dedicated short-lived connection (works on a database that is not migrated yet). */
export async function readStatus(databaseUrl: string): Promise<StoreStatus & { expectedSchemaVersion: number }> {
  const client = await connectClient(databaseUrl, "optchat-status");
  try {
    return { ...(await readStoreStatus(client)), expectedSchemaVersion: SCHEMA_VERSION };
  } finally {
    await client.end().catch(() => {});
  }
}
