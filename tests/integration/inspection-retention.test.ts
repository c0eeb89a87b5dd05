import { describe, expect, it } from "vitest";
import { INJECTIONS_KEPT_PER_SESSION } from "../../src/store/injections.js";
import { PROBLEMS_KEPT_PER_SESSION } from "../../src/store/problems.js";
import { useTestMemory } from "../helpers.js";

/** The adapter's inspection rows (one injection per model request, problems) stay bounded per session. */

const t = useTestMemory();

async function count(sql: string, params: unknown[]): Promise<number> {
  const { rows } = await t.memory.pool.query<{ n: number }>(sql, params);
  return rows[0]?.n ?? -1;
}

describe("inspection rows retention", () => {
  it("keeps each session's newest injections and leaves other sessions' alone", async () => {
    const a = await t.memory.openSession({ host: "test", hostSessionId: "retention-a", projectId: "retention" });
    const b = await t.memory.openSession({ host: "test", hostSessionId: "retention-b", projectId: "retention" });
    const ids: number[] = [];
    const record = (sessionId: string, k: number) =>
      t.memory.host.recordInjection({
        sessionId,
        turnId: `t${k}`,
        holder: "test",
        status: "injected",
        mode: "replace",
        query: null,
        detail: { k },
        error: null,
      });
    for (let k = 0; k < 3; k++) await record(b.sessionId, k);
    for (let k = 0; k < INJECTIONS_KEPT_PER_SESSION + 30; k++) ids.push(await record(a.sessionId, k));
    const kept = await t.memory.pool.query<{ injection_id: string }>(
      "SELECT injection_id FROM optchat.injections WHERE session_id = $1::text ORDER BY injection_id",
      [a.sessionId],
    );
    expect(kept.rows.map((r) => Number(r.injection_id))).toEqual(ids.slice(-INJECTIONS_KEPT_PER_SESSION));
    expect((await t.memory.host.listInjections(a.sessionId, 1))[0]?.detail).toEqual({
      k: INJECTIONS_KEPT_PER_SESSION + 29,
    });
    expect(
      await count("SELECT count(*)::int AS n FROM optchat.injections WHERE session_id = $1::text", [b.sessionId]),
    ).toBe(3);
  });

  it("keeps each host session's newest problems, and the revert marker whatever comes after it", async () => {
    const problem = (hostSessionId: string | null, k: number, code: string | null = null) =>
      t.memory.host.reportProblem({
        host: "opencode",
        hostSessionId,
        holder: "test",
        operation: "ingest",
        code,
        message: `problem ${k}`,
      });
    await problem("ses_reverted", -1, "HISTORY_REWRITTEN");
    for (let k = 0; k < PROBLEMS_KEPT_PER_SESSION + 20; k++) await problem("ses_reverted", k);
    for (let k = 0; k < PROBLEMS_KEPT_PER_SESSION + 5; k++) await problem(null, k);
    await problem("ses_other", 0);

    const perSession = await t.memory.pool.query<{ host_session_id: string | null; n: number }>(
      `SELECT host_session_id, count(*)::int AS n FROM optchat.adapter_problems
        WHERE code IS NULL GROUP BY host_session_id ORDER BY host_session_id NULLS FIRST`,
    );
    expect(perSession.rows).toEqual([
      { host_session_id: null, n: PROBLEMS_KEPT_PER_SESSION },
      { host_session_id: "ses_other", n: 1 },
      { host_session_id: "ses_reverted", n: PROBLEMS_KEPT_PER_SESSION },
    ]);
    // The newest survive; the marker that switches the reverted session's memory off is still found.
    const oldestKept = await t.memory.pool.query<{ message: string }>(
      `SELECT message FROM optchat.adapter_problems WHERE host_session_id = 'ses_reverted' AND code IS NULL
        ORDER BY problem_id LIMIT 1`,
    );
    expect(oldestKept.rows[0]?.message).toBe("problem 20");
    expect(await t.memory.host.findProblem("opencode", "ses_reverted", "HISTORY_REWRITTEN")).toMatchObject({
      message: "problem -1",
    });
  });
});
