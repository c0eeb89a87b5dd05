import type pg from "pg";
import { connectClient, type Queryable } from "./db.js";

/**
 * Cross-process wake-ups over LISTEN/NOTIFY on one dedicated connection (a pooled one would be closed while idle and
 * silently stop listening; postgres-stack-facts). Notifications only shorten waits: every waiter also re-checks on a
 * timer, so a lost notification (or a dropped connection) costs latency, never correctness.
 */
export class TreeListener {
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  private readonly waiters = new Set<{ treeId: number; wake: () => void }>();

  constructor(
    private readonly databaseUrl: string,
    private readonly channel: string,
  ) {}

  private async connect(): Promise<pg.Client> {
    if (this.client) return this.client;
    this.connecting ??= (async () => {
      const client = await connectClient(this.databaseUrl, "optchat-listen");
      client.on("notification", (message) => {
        const treeId = Number(message.payload);
        for (const waiter of [...this.waiters]) if (waiter.treeId === treeId) waiter.wake();
      });
      client.on("error", () => {
        this.client = undefined;
        this.connecting = undefined;
      });
      await client.query(`LISTEN ${this.channel}`);
      this.client = client;
      return client;
    })().catch((error) => {
      this.connecting = undefined;
      throw error;
    });
    return await this.connecting;
  }

  /** Resolves after a notification for `treeId`, or after `maxWaitMs`, whichever comes first. */
  async waitForChange(treeId: number, maxWaitMs: number): Promise<void> {
    await this.connect().catch(() => undefined); // without a listener we still poll
    await new Promise<void>((resolve) => {
      const waiter = {
        treeId,
        wake: () => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve();
        },
      };
      const timer = setTimeout(waiter.wake, maxWaitMs);
      this.waiters.add(waiter);
    });
  }

  /** Resolves once this process is listening (so a change committed afterwards cannot be missed). */
  async ready(): Promise<void> {
    await this.connect();
  }

  async close(): Promise<void> {
    for (const waiter of [...this.waiters]) waiter.wake();
    const client = this.client;
    this.client = undefined;
    this.connecting = undefined;
    await client?.end().catch(() => {});
  }
}

/** Channel on which a committed leaf, node or view change of a tree is announced (payload: the tree id). */
export const TREE_CHANNEL = "optchat_tree";

/** Announces a change of `treeId`; delivered when the caller's transaction commits (never before, never if it aborts). */
export async function notifyTreeChanged(db: Queryable, treeId: number): Promise<void> {
  await db.query("SELECT pg_notify($1::text, $2::text)", [TREE_CHANNEL, String(treeId)]);
}
