import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveConfig } from "../../src/memory/config.js";
import { migrateAll } from "../../src/memory/migrate.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { type PrivateCluster, privateClusterUnsupported, startPrivateCluster } from "../private-cluster.js";

/**
 * PostgreSQL restarting under the service API, on a private cluster this file stops and starts (never the machine's
 * server). Before issue 9 item 7 every call in the outage threw the driver's raw error (57P03 "the database system is
 * shutting down / starting up", "Connection terminated unexpectedly", ECONNREFUSED); now an idempotent call is retried
 * for OPTCHAT_DATABASE_RETRY_MS and otherwise fails with DATABASE_UNAVAILABLE naming the server, the fix and the setting.
 */

const unsupported = privateClusterUnsupported();
let cluster: PrivateCluster;
let url: string;
let patient: Memory; // retries for 30 s
let impatient: Memory; // OPTCHAT_DATABASE_RETRY_MS=0

beforeAll(async () => {
  if (unsupported) return;
  cluster = await startPrivateCluster();
  url = cluster.url("optchat_restart");
  await migrateAll(url);
  const config = (databaseRetryMs: number) =>
    resolveConfig({ overrides: { databaseUrl: url, poolSize: 3, databaseRetryMs } });
  patient = await openMemory(config(30_000), { applicationName: "optchat-patient" });
  impatient = await openMemory(config(0), { applicationName: "optchat-impatient" });
}, 180_000);

afterAll(async () => {
  await patient?.close().catch(() => {});
  await impatient?.close().catch(() => {});
  await cluster?.destroy();
});

/** Polls new connections until the server answers one with `sqlState` (or accepts it: undefined). */
async function untilConnectionsGet(sqlState: string | undefined, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url });
    client.on("error", () => {});
    const state = await client.connect().then(
      () => undefined,
      (error: { code?: string }) => error.code ?? "no sqlstate",
    );
    await client.end().catch(() => {});
    if (state === sqlState) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${state})`);
    await delay(50);
  }
}

/** Ends every other client's connection (the pools' and pg-boss's idle ones), as a restart does. */
async function terminateOtherBackends(holder: pg.Client): Promise<void> {
  await holder.query(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
  );
}

const event = (sessionId: string, messageId: string) => ({
  sessionId,
  turnId: "t1",
  kind: "user" as const,
  finalization: { hostSessionId: `restart-${sessionId}`, messageId },
  occurredAt: new Date().toISOString(),
  content: `written while PostgreSQL restarts (${messageId})`,
});

describe.skipIf(unsupported !== undefined)(
  `PostgreSQL restarting under the service API${unsupported ? ` (skipped: ${unsupported})` : ""}`,
  () => {
    it("shutting down, down, starting again: an idempotent ingest waits and lands once; with retries off each phase is DATABASE_UNAVAILABLE", async () => {
      const session = await patient.openSession({ host: "test", hostSessionId: "restart-1", projectId: "restart" });
      const impatientSession = await impatient.getSession(session.sessionId);
      expect(impatientSession.sessionId).toBe(session.sessionId);

      // A smart shutdown waits for this client; meanwhile the server answers new connections with 57P03.
      const holder = new pg.Client({ connectionString: url, application_name: "optchat-holder" });
      holder.on("error", () => {});
      await holder.connect();
      // Idle connections would hold a smart shutdown open (pg-boss's for 10 s): end them, so calls need new ones.
      await terminateOtherBackends(holder);
      await cluster.stop("smart", { wait: false });
      await untilConnectionsGet("57P03", "the server to refuse new connections with 57P03");

      const started = Date.now();
      const landing = patient.ingest(event(session.sessionId, "m1"));
      let settled = false;
      void landing.finally(() => {
        settled = true;
      });

      // With retries off: 57P03 (it was the raw error "the database system is shutting down").
      const shuttingDown = await impatient.getSession(session.sessionId).catch((e: unknown) => e);
      expect(shuttingDown).toMatchObject({ code: "DATABASE_UNAVAILABLE", details: { sqlState: "57P03" } });
      expect((shuttingDown as Error).message).toMatch(
        /^Cannot reach PostgreSQL at 127\.0\.0\.1:\d+\/optchat_restart: the database system is shutting down\. Start it .*retried for \d+ ms \(raise OPTCHAT_DATABASE_RETRY_MS/,
      );

      // The last client leaves: the server stops; connections are refused (ECONNREFUSED, no SQLSTATE).
      await holder.end();
      await untilConnectionsGet("ECONNREFUSED", "the server to be down");
      const down = await impatient.readPayload({ sessionId: session.sessionId, generation: 0, seq: 0 }).catch((e) => e);
      expect(down).toMatchObject({ code: "DATABASE_UNAVAILABLE" });
      expect((down as Error).message).toMatch(/ECONNREFUSED.*Start it \(docker compose up -d db\)/);
      // A call that must not run twice is not retried at all.
      const once = await patient.host
        .reportProblem({ host: "test", hostSessionId: null, holder: "h", operation: "test", code: null, message: "m" })
        .catch((e: unknown) => e);
      expect(once).toMatchObject({ code: "DATABASE_UNAVAILABLE" });
      expect(settled).toBe(false); // the ingest is still waiting

      await delay(500);
      await cluster.start();
      const result = await landing;
      expect(result.status).toBe("sealed");
      expect(Date.now() - started).toBeGreaterThan(500);
      const records = await patient.listRecords(session.sessionId);
      expect(records.map((r) => r.seq)).toEqual([0]);
    }, 120_000);

    it("an immediate restart in the middle of a transaction: the ingest is run again and each record stored once", async () => {
      const session = await patient.openSession({ host: "test", hostSessionId: "restart-2", projectId: "restart" });
      let attempts = 0;
      let restarted: Promise<void> = Promise.resolve();
      const results = await patient.ingestMany([event(session.sessionId, "a"), event(session.sessionId, "b")], {
        beforeCommit: async () => {
          attempts += 1;
          if (attempts > 1) return;
          // Crash-stop and start again without waiting: the retries meet a refused port, then a server in recovery.
          await cluster.stop("immediate");
          restarted = cluster.start();
        },
      });
      expect(results.map((r) => r.status)).toEqual(["sealed", "sealed"]);
      expect(attempts).toBeGreaterThanOrEqual(2);
      await restarted;
      expect((await patient.listRecords(session.sessionId)).map((r) => r.seq)).toEqual([0, 1]);
      // Reads during the next restart wait for the server too.
      await cluster.stop("fast");
      const reading = patient.listRecords(session.sessionId);
      await delay(300);
      await cluster.start();
      expect((await reading).length).toBe(2);
    }, 120_000);
  },
);
