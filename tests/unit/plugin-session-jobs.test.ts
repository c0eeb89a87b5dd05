import { describe, expect, it } from "vitest";
import type { Diagnostics } from "../../plugin/base/diagnostics.js";
import { RequestSlice } from "../../plugin/request/slice.js";
import { JOB_RETRY_DELAYS_MS, SessionJobs } from "../../plugin/turns/session-jobs.js";
import { newSessionState } from "../../plugin/turns/session-state.js";
import { OptchatError } from "../../src/core/errors.js";
import type { Session } from "../../src/memory/index.js";
import { ManualClock } from "../helpers.js";

/** The per-session ordered queue (plugin/turns/session-jobs.ts) with a manual clock: retries wait on it, never on real time. */

function setup() {
  const clock = new ManualClock();
  const problems: string[] = [];
  const diagnostics = {
    log: () => {},
    problem: async (operation: string, _id: string | undefined, error: unknown) => {
      problems.push(`${operation}: ${(error as Error).message}`);
    },
  } as unknown as Diagnostics;
  const session = { sessionId: "00000000-0000-4000-8000-000000000001" } as Session;
  const jobs = new SessionJobs(async () => session, clock, diagnostics);
  const state = newSessionState("ses_jobs", new RequestSlice());
  return { clock, problems, jobs, state };
}

/** Lets queued promise callbacks run (no timer involved). */
async function settleMicrotasks(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

describe("SessionJobs", () => {
  it("runs a session's jobs in order, a failing one retried after its wait before the next starts", async () => {
    const { clock, jobs, state, problems } = setup();
    const ran: string[] = [];
    let failures = 2;
    jobs.enqueue(state, "first", async () => {
      ran.push("first");
      if (failures-- > 0) throw new Error("connection refused");
    });
    jobs.enqueue(state, "second", async () => {
      ran.push("second");
    });
    await settleMicrotasks();
    expect(ran).toEqual(["first"]);
    clock.advance(JOB_RETRY_DELAYS_MS[0] - 1);
    await settleMicrotasks();
    expect(ran).toEqual(["first"]);
    clock.advance(1);
    await settleMicrotasks();
    expect(ran).toEqual(["first", "first"]);
    clock.advance(JOB_RETRY_DELAYS_MS[1]);
    await state.queue;
    expect(ran).toEqual(["first", "first", "first", "second"]);
    expect(problems).toEqual([]);
  });

  it("records an optchat error at once, without retrying; gives up after the last wait on anything else", async () => {
    const { clock, jobs, state, problems } = setup();
    let attempts = 0;
    jobs.enqueue(state, "final", async () => {
      attempts += 1;
      throw new OptchatError("INPUT_INVALID", "bad event");
    });
    await state.queue;
    expect({ attempts, problems }).toEqual({ attempts: 1, problems: ["final: bad event"] });
    let transient = 0;
    jobs.enqueue(state, "transient", async () => {
      transient += 1;
      throw new Error("connection refused");
    });
    for (const wait of JOB_RETRY_DELAYS_MS) {
      await settleMicrotasks();
      clock.advance(wait);
    }
    await state.queue;
    expect(transient).toBe(JOB_RETRY_DELAYS_MS.length + 1);
    expect(problems.at(-1)).toBe("transient: connection refused");
  });

  it("stops waiting once the process closes: the failure is recorded and later jobs still run", async () => {
    const { jobs, state, problems } = setup();
    const ran: string[] = [];
    jobs.enqueue(state, "ingest", async () => {
      throw new Error("connection refused");
    });
    jobs.enqueue(state, "after", async () => {
      ran.push("after");
    });
    await settleMicrotasks();
    jobs.stopRetrying();
    await state.queue;
    expect(problems).toEqual(["ingest: connection refused"]);
    expect(ran).toEqual(["after"]);
  });
});
