import { describe, expect, it } from "vitest";
import { startWorker } from "../../src/memory/worker.js";
import { ingestEvent, retrying, runCli, useTestMemory } from "../helpers.js";

/** `optchat inspect`: one session's health from the database, with a verdict that tells working from failing. */

const ok = useTestMemory();
const failing = useTestMemory({ summarizer: "fake:fail", failureRetrySeconds: 1 });

async function oneTurn(t: typeof ok, host: string, content: string) {
  const session = await t.memory.openSession({ host: "opencode", hostSessionId: host, projectId: "prj_inspect" });
  await t.memory.admitTurn({ sessionId: session.sessionId, turnId: "t1", query: "q" });
  await t.memory.ingestMany([
    ingestEvent({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: "user",
      host,
      messageId: "m1",
      occurredAt: new Date().toISOString(),
      content,
    }),
  ]);
  await t.memory.finishTurn({ sessionId: session.sessionId, turnId: "t1" }, "completed");
  return session;
}

describe("optchat inspect", () => {
  it("finds a session by its OpenCode id and reports it up to date once summarized and published", async () => {
    const session = await oneTurn(ok, "ses_host_ok", "a short request");
    const worker = await startWorker(ok.memory, ok.config, () => {});
    try {
      const report = await retrying(
        async () => {
          const result = await runCli(["inspect", "ses_host_ok", "--json"], { DATABASE_URL: ok.url });
          expect(result.code, result.stderr).toBe(0);
          const parsed = JSON.parse(result.stdout);
          expect(parsed.health.verdict).toBe("up to date");
          return parsed;
        },
        30_000,
        "an up-to-date verdict",
      );
      expect(report.session.id).toBe(session.sessionId);
      expect(report.health.records).toBe(1);
      expect(report.health.publications).toBe(1);
      expect(report.health.turns.completed).toBe(1);
    } finally {
      await worker.stop();
    }
  });

  it("says failing, with the summarizer's error, when summaries keep failing", async () => {
    const session = await oneTurn(failing, "ses_host_fail", "a long request ".repeat(60));
    const worker = await startWorker(failing.memory, failing.config, () => {});
    try {
      const report = await retrying(
        async () => {
          const result = await runCli(["inspect", session.sessionId, "--json"], { DATABASE_URL: failing.url });
          const parsed = JSON.parse(result.stdout);
          expect(parsed.health.verdict).toMatch(/^failing:/);
          return parsed;
        },
        30_000,
        "a failing verdict",
      );
      expect(report.health.lastNodeError).toContain("configured to fail");
      expect(report.health.publications).toBe(0);
    } finally {
      await worker.stop();
    }
  });

  it("names both kinds of id when the session is unknown", async () => {
    const result = await runCli(["inspect", "ses_nothing_here"], { DATABASE_URL: ok.url });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("SESSION_NOT_FOUND");
    expect(result.stderr).toContain("OpenCode session id");
  });
});
