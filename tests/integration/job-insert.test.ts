import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createBoss,
  enqueueNodeJobs,
  enqueuePublication,
  type JobInserter,
  NODE_QUEUE,
  PUBLISH_QUEUE,
  producerJobs,
} from "../../src/compactor/queue.js";
import { withTransaction } from "../../src/store/db.js";
import { useTestMemory } from "../helpers.js";

// A producer inserts jobs without pg-boss (compactor/queue.ts producerJobs, store/job-queue.ts insertJobs): its rows
// must be the ones pg-boss's own insert writes, and a worker listening must be woken the same way.
const db = useTestMemory();

/** Every column a job row carries that does not depend on the moment or the random id. */
const COLUMNS = `name, data, priority, state, retry_limit, retry_count, retry_delay, retry_backoff, retry_delay_max,
  expire_seconds, deletion_seconds, singleton_key, singleton_on, group_id, group_tier, dead_letter, policy,
  heartbeat_seconds, blocked, blocking, pending_dependencies, trace_context, upsert_by_key, started_on, completed_on,
  output, source_name, source_id,
  round(extract(epoch FROM start_after - created_on))::int AS start_delay,
  round(extract(epoch FROM keep_until - start_after))::int AS kept_after_start`;

let boss: Awaited<ReturnType<typeof createBoss>>;
let listener: pg.Client;
const notifications: { channel: string; payload: string | undefined }[] = [];

beforeAll(async () => {
  boss = await createBoss(db.url, "installer");
  boss.on("error", () => {});
  await boss.start();
  listener = new pg.Client({ connectionString: db.url });
  await listener.connect();
  listener.on("notification", (n) => notifications.push({ channel: n.channel, payload: n.payload }));
  const channel = (await listener.query("SELECT 'pgboss_' || left(encode(sha224('pgboss'::bytea), 'hex'), 24) AS c"))
    .rows[0].c as string;
  await listener.query(`LISTEN ${channel}`);
});

afterAll(async () => {
  await listener?.end();
  await boss?.stop({ graceful: false, close: true });
});

async function enqueueBoth(inserter: JobInserter, tag: string, delaySeconds: number): Promise<void> {
  await withTransaction(db.memory.pool, async (tx) => {
    await enqueueNodeJobs(inserter, tx, 7, [{ level: 0, index: tag === "boss" ? 1 : 2 }], delaySeconds);
    await enqueuePublication(inserter, tx, { sessionId: `s-${tag}`, generation: 1, turnId: "t1" }, delaySeconds);
  });
}

async function rows(key: string): Promise<Record<string, unknown>[]> {
  const result = await db.memory.pool.query(
    `SELECT ${COLUMNS} FROM pgboss.job WHERE singleton_key LIKE $1 ORDER BY name, singleton_key`,
    [key],
  );
  return result.rows;
}

/** A row without what differs by design between the two inserts compared. */
function strip(row: Record<string, unknown> | undefined): Record<string, unknown> {
  return { ...row, data: null, singleton_key: null };
}

async function notified(): Promise<string[]> {
  await new Promise((resolve) => setTimeout(resolve, 300));
  return notifications.splice(0).map((n) => n.payload ?? "");
}

describe("producer job inserts without pg-boss", () => {
  it("write the rows pg-boss's insert writes, for both queues, and notify like it", async () => {
    await notified();
    await enqueueBoth(boss, "boss", 0);
    const bossNotes = await notified();
    await enqueueBoth(producerJobs, "producer", 0);
    const producerNotes = await notified();

    const [bossNode] = await rows("7:0:1");
    const [producerNode] = await rows("7:0:2");
    const [bossPublication] = await rows("s-boss:%");
    const [producerPublication] = await rows("s-producer:%");
    expect(bossNode?.name).toBe(NODE_QUEUE);
    expect(bossPublication?.name).toBe(PUBLISH_QUEUE);
    expect(strip(producerNode)).toEqual(strip(bossNode));
    expect(strip(producerPublication)).toEqual(strip(bossPublication));
    expect(producerNode?.data).toEqual({ treeId: 7, level: 0, index: 2 });
    expect(producerNode?.singleton_key).toBe("7:0:2");
    expect(producerPublication?.data).toEqual({ sessionId: "s-producer", generation: 1, turnId: "t1" });
    expect(producerPublication?.singleton_key).toBe("s-producer:1:t1");
    // One NOTIFY per queue with jobs that may start now, carrying the queue's name.
    expect(producerNotes.sort()).toEqual(bossNotes.sort());
    expect(producerNotes.sort()).toEqual([NODE_QUEUE, PUBLISH_QUEUE]);
  });

  it("delay jobs like pg-boss, without waking a worker for them", async () => {
    await notified();
    await withTransaction(db.memory.pool, (tx) => enqueueNodeJobs(boss, tx, 8, [{ level: 1, index: 0 }], 30));
    await withTransaction(db.memory.pool, (tx) => enqueueNodeJobs(producerJobs, tx, 8, [{ level: 1, index: 1 }], 30));
    expect(await notified()).toEqual([]);
    const [fromBoss] = await rows("8:1:0");
    const [fromProducer] = await rows("8:1:1");
    expect(fromBoss?.start_delay).toBe(30);
    expect(strip(fromProducer)).toEqual(strip(fromBoss));
  });

  it("exist only if the caller's transaction commits", async () => {
    await expect(
      withTransaction(db.memory.pool, async (tx) => {
        await enqueueNodeJobs(producerJobs, tx, 9, [{ level: 0, index: 0 }]);
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");
    expect(await rows("9:%")).toEqual([]);
  });

  it("refuse job options they would otherwise drop", async () => {
    await withTransaction(db.memory.pool, async (tx) => {
      await expect(
        producerJobs.insert(NODE_QUEUE, [{ data: {}, singletonKey: "x", priority: 3 }], {
          db: { executeSql: (text: string, values?: unknown[]) => tx.query(text, values) },
        }),
      ).rejects.toThrow("priority");
    });
  });
});
