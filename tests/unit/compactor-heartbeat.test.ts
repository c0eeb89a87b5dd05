import { afterEach, describe, expect, it, vi } from "vitest";
import { startHeartbeat } from "../../src/compactor/heartbeat.js";
import type { Pool } from "../../src/store/db.js";

/** A compactor worker's heartbeat loop (src/compactor/heartbeat.ts) on a recorded pool, with fake timers. */

afterEach(() => {
  vi.useRealTimers();
});

/** A pool that records each statement's first words and answers `answer` (a beat finds its row unless told). */
function recordingPool(answer: (sql: string) => Promise<unknown> = async () => ({ rowCount: 1, rows: [] })) {
  const statements: string[] = [];
  const pool = {
    query: (sql: string) => {
      statements.push(sql.replace(/\s+/g, " ").trim().split(" ").slice(0, 3).join(" "));
      return answer(sql);
    },
  } as unknown as Pool;
  return { pool, statements };
}

describe("the compactor's heartbeat", () => {
  it("registers, beats every interval, writes a pause at once, and marks the row stopped", async () => {
    vi.useFakeTimers();
    const { pool, statements } = recordingPool();
    const heartbeat = await startHeartbeat(pool, { runsIn: "optchat worker", summarizer: "fake" }, () => {}, 5_000);
    expect(statements).toEqual(["WITH gone AS"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(statements).toEqual([
      "WITH gone AS",
      "UPDATE optchat.compactor_workers SET",
      "UPDATE optchat.compactor_workers SET",
    ]);
    heartbeat.setPaused(true);
    heartbeat.setPaused(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(statements).toHaveLength(4);
    await heartbeat.stop();
    expect(statements).toHaveLength(5);
    // Stopped: no beat any more.
    await vi.advanceTimersByTimeAsync(30_000);
    expect(statements).toHaveLength(5);
  });

  it("reports a failing beat once per streak, and registers again when its row is gone", async () => {
    vi.useFakeTimers();
    let mode: "ok" | "fail" | "gone" = "ok";
    const { pool, statements } = recordingPool(async () => {
      if (mode === "fail") throw new Error("connection refused");
      return { rowCount: mode === "gone" ? 0 : 1, rows: [] };
    });
    const reports: string[] = [];
    const heartbeat = await startHeartbeat(pool, { runsIn: "x", summarizer: "fake" }, (e) => reports.push(e), 1_000);
    mode = "fail";
    await vi.advanceTimersByTimeAsync(3_000);
    expect(reports).toEqual(["heartbeat: connection refused"]);
    mode = "gone";
    statements.length = 0;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(statements).toEqual([
      "UPDATE optchat.compactor_workers SET",
      "WITH gone AS",
      "UPDATE optchat.compactor_workers SET",
    ]);
    mode = "fail";
    await vi.advanceTimersByTimeAsync(1_000);
    expect(reports).toHaveLength(2);
    await heartbeat.stop();
  });

  it("stops within its bound when the database does not answer", async () => {
    vi.useFakeTimers();
    let hang = false;
    const { pool } = recordingPool(() => (hang ? new Promise(() => {}) : Promise.resolve({ rowCount: 1, rows: [] })));
    const heartbeat = await startHeartbeat(pool, { runsIn: "x", summarizer: "fake" }, () => {}, 1_000);
    hang = true;
    await vi.advanceTimersByTimeAsync(1_000);
    let stopped = false;
    void heartbeat.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(1_999);
    expect(stopped).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(stopped).toBe(true);
  });
});
