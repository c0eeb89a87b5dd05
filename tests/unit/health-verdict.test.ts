import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compactorVerdict,
  type HealthFacts,
  isAlive,
  STALLED_AFTER_SECONDS,
  sessionVerdict,
  setupVerdict,
  WORKER_ALIVE_SECONDS,
  type WorkerFact,
} from "../../src/core/health.js";

/** The compactor's verdict (src/core/health.ts): pure, so every combination of facts can be thrown at it. */

const worker = fc.record<WorkerFact>({
  runsIn: fc.constantFrom("optchat worker", "OpenCode process", "local server"),
  hostName: fc.constant("host"),
  pid: fc.integer({ min: 1, max: 99999 }),
  beatAgeSeconds: fc.integer({ min: 0, max: 3 * WORKER_ALIVE_SECONDS }),
  stopped: fc.boolean(),
  paused: fc.boolean(),
  lastError: fc.constant(null),
});

const facts = fc
  .record({
    workers: fc.array(worker, { maxLength: 4 }),
    waitingJobs: fc.integer({ min: 0, max: 20 }),
    oldestWaitingSeconds: fc.integer({ min: 0, max: 10 * STALLED_AFTER_SECONDS }),
    failingNodes: fc.integer({ min: 0, max: 3 }),
    failingPublications: fc.integer({ min: 0, max: 2 }),
    lastFailureSecondsAgo: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: null }),
    lastOkCallSecondsAgo: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: null }),
    embeddedWorker: fc.constantFrom<"on" | "off" | undefined>("on", "off", undefined),
    budgetCapReached: fc.constantFrom(null, "OPTCHAT_BUDGET_DAILY_USD"),
  })
  .map(
    (f): HealthFacts => ({
      ...f,
      oldestWaitingSeconds: f.waitingJobs === 0 ? 0 : f.oldestWaitingSeconds,
      oldestWaitingSince: f.waitingJobs === 0 ? null : "2026-12-07T13:00:00.000Z",
      lastError: f.failingNodes + f.failingPublications > 0 ? "HTTP 401: invalid key" : null,
      ...(f.embeddedWorker ? { embeddedWorker: f.embeddedWorker } : { embeddedWorker: undefined }),
    }),
  );

describe("the compactor's verdict", () => {
  it("is stalled exactly when it gives reasons, and its summary starts with its state", () => {
    fc.assert(
      fc.property(facts, (f) => {
        const verdict = compactorVerdict(f);
        expect(verdict.state === "stalled").toBe(verdict.reasons.length > 0);
        expect(verdict.state).not.toBe("not set up");
        expect(verdict.summary.startsWith(`${verdict.state}: `)).toBe(true);
        for (const reason of verdict.reasons) expect(reason.fix.length).toBeGreaterThan(0);
      }),
    );
  });

  it("says no worker is alive when a job waited past the threshold and none beats, whatever else holds", () => {
    fc.assert(
      fc.property(facts, (f) => {
        const stalled = f.waitingJobs > 0 && f.oldestWaitingSeconds > STALLED_AFTER_SECONDS;
        const causes = compactorVerdict(f).reasons.map((r) => r.cause);
        expect(causes.includes("no-worker")).toBe(stalled && !f.workers.some(isAlive));
        expect(causes.includes("workers-paused")).toBe(
          stalled && f.workers.some(isAlive) && f.workers.filter(isAlive).every((w) => w.paused),
        );
        // Jobs that have not waited long are never a stall, with or without a worker.
        if (!stalled) expect(causes.filter((c) => c !== "model-failing")).toEqual([]);
      }),
    );
  });

  it("never advises a setting that is already in effect", () => {
    fc.assert(
      fc.property(facts, (f) => {
        const advice = compactorVerdict(f)
          .reasons.map((r) => r.fix)
          .join(" ");
        // The embedded worker is on by default: turning it on is never the advice.
        expect(advice).not.toMatch(/EMBEDDED_WORKER\s*=\s*on|set OPTCHAT_EMBEDDED_WORKER/);
        if (f.embeddedWorker === "off") expect(advice).not.toContain("its embedded worker starts");
      }),
    );
  });

  it("blames the model when summaries fail and no call succeeded since the last failure", () => {
    const base: HealthFacts = {
      workers: [{ runsIn: "optchat worker", hostName: "h", pid: 1, beatAgeSeconds: 1, stopped: false, paused: false }],
      waitingJobs: 0,
      oldestWaitingSeconds: 0,
      oldestWaitingSince: null,
      failingNodes: 2,
      failingPublications: 0,
      lastError: "HTTP 401: invalid x-api-key",
      lastFailureSecondsAgo: 5,
      lastOkCallSecondsAgo: null,
    };
    const failing = compactorVerdict(base);
    expect(failing.state).toBe("stalled");
    expect(failing.summary).toBe(
      "stalled: the compactor model fails: 2 summaries and 0 publications keep failing, last 5 s ago: HTTP 401: invalid x-api-key",
    );
    // A call succeeded after the last failure: one odd input, not the model; said as a note.
    const odd = compactorVerdict({ ...base, lastOkCallSecondsAgo: 1 });
    expect(odd.state).toBe("working");
    expect(odd.notes.join(" ")).toContain("invalid x-api-key");
  });

  it("counts a worker alive only while its beat is recent and it has not stopped", () => {
    const w: WorkerFact = {
      runsIn: "x",
      hostName: "h",
      pid: 1,
      beatAgeSeconds: WORKER_ALIVE_SECONDS,
      stopped: false,
      paused: true,
    };
    expect(isAlive(w)).toBe(true);
    expect(isAlive({ ...w, beatAgeSeconds: WORKER_ALIVE_SECONDS + 1 })).toBe(false);
    expect(isAlive({ ...w, stopped: true })).toBe(false);
  });

  it("says what is missing when not set up, naming the command", () => {
    expect(setupVerdict({ kind: "schema", version: 0, expected: 15 })).toMatchObject({
      state: "not set up",
      summary: "not set up: schema not migrated (no optchat tables)",
      reasons: [{ cause: "schema", fix: "run `optchat migrate`" }],
    });
    expect(setupVerdict({ kind: "schema", version: 12, expected: 15 }).summary).toBe(
      "not set up: schema version 12, this code needs 15",
    );
    expect(setupVerdict({ kind: "no-database", database: "optchat" }).reasons[0]?.fix).toContain("optchat migrate");
    expect(setupVerdict({ kind: "unreachable", where: "h:1/db", reason: "ECONNREFUSED" }).summary).toBe(
      "not set up: database unreachable at h:1/db: ECONNREFUSED",
    );
  });
});

describe("a session's verdict", () => {
  const working = compactorVerdict({
    workers: [],
    waitingJobs: 0,
    oldestWaitingSeconds: 0,
    oldestWaitingSince: null,
    failingNodes: 0,
    failingPublications: 0,
    lastError: null,
    lastFailureSecondsAgo: null,
    lastOkCallSecondsAgo: null,
  });
  const stalled = compactorVerdict({
    workers: [],
    waitingJobs: 3,
    oldestWaitingSeconds: 600,
    oldestWaitingSince: "2026-12-07T13:00:00.000Z",
    failingNodes: 0,
    failingPublications: 0,
    lastError: null,
    lastFailureSecondsAgo: null,
    lastOkCallSecondsAgo: null,
  });
  const session = {
    stuckTurnIds: [],
    stuckHolder: null,
    stuckAdvice: "prompt again",
    failingNodes: 0,
    failingPublications: 0,
    pending: false,
    compactor: working,
    budgetCapReached: null,
  };

  it("orders stuck, failing, stalled, degraded, working, up to date", () => {
    expect(sessionVerdict(session)).toBe("up to date");
    expect(sessionVerdict({ ...session, pending: true })).toBe("working: summaries or publications are pending");
    expect(sessionVerdict({ ...session, pending: true, compactor: stalled })).toBe(
      "stalled: no compactor worker has run on this database in the last day; 3 jobs wait, the oldest since 2026-12-07T13:00:00.000Z (600 s); start `optchat worker`, or prompt in OpenCode with this plugin (its embedded worker starts when jobs wait)",
    );
    // Nothing pending in this session: another session's backlog does not make it stalled.
    expect(sessionVerdict({ ...session, compactor: stalled })).toBe("up to date");
    expect(sessionVerdict({ ...session, budgetCapReached: "OPTCHAT_BUDGET_DAILY_USD" })).toMatch(/^degraded: /);
    expect(sessionVerdict({ ...session, failingNodes: 1, compactor: stalled })).toMatch(/^failing: /);
    expect(sessionVerdict({ ...session, failingNodes: 1, stuckTurnIds: ["t1"], stuckHolder: "opencode:1@h" })).toMatch(
      /^stuck: turn t1 .*last holder opencode:1@h.*prompt again$/,
    );
  });
});
