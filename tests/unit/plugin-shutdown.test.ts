import { describe, expect, it } from "vitest";
import { collect, startScript, waitForLine } from "../helpers.js";

/**
 * plugin/transport/shutdown.ts in a real process: SIGTERM (which OpenCode 1.18.33 does not handle: the process died before the
 * plugin flushed, issue 9 item 1) runs the close first and still ends the process by SIGTERM; a close that outlives
 * its budget does not keep the process alive; SIGINT (which does not stop 1.18.33) flushes and leaves it running.
 */
const FIXTURE = "tests/fixtures/close-on-signal.ts";

describe("close on signals", () => {
  it("closes before SIGTERM ends the process, and the process still ends by SIGTERM", async () => {
    const child = startScript(FIXTURE, ["3000"]);
    const done = collect(child);
    await waitForLine(child, /^ready$/);
    child.kill("SIGTERM");
    const result = await done;
    expect(result.stdout).toContain("closing budget=3000\nclosed\n");
    expect(result.signal).toBe("SIGTERM");
  });

  it("does not wait past the budget for a close that hangs", async () => {
    const child = startScript(FIXTURE, ["300"], { CLOSE_MS: "60000" });
    const done = collect(child);
    await waitForLine(child, /^ready$/);
    const sent = Date.now();
    child.kill("SIGTERM");
    const result = await done;
    expect(result.stdout).toContain("closing budget=300");
    expect(result.stdout).not.toContain("closed");
    expect(result.signal).toBe("SIGTERM");
    // Budget plus the 500 ms margin, plus process teardown on a loaded machine.
    expect(Date.now() - sent).toBeLessThan(10_000);
  });

  it("flushes on SIGINT and keeps running", async () => {
    const child = startScript(FIXTURE, ["3000"]);
    const done = collect(child);
    await waitForLine(child, /^ready$/);
    const flushed = waitForLine(child, /^flushed/);
    child.kill("SIGINT");
    expect(await flushed).toBe("flushed budget=3000");
    expect(child.exitCode).toBeNull();
    child.kill("SIGTERM");
    expect((await done).stdout).toContain("closed");
  });

  it("closes the plugin's thread and an in-process adapter of the same process, then ends by SIGTERM", async () => {
    // One owner of the signals: a bridge to a plugin thread (its close forwarded to the thread and answered) and an
    // adapter in OpenCode's own thread are closed by the same SIGTERM.
    const child = startScript("tests/fixtures/bridge-on-signal.ts", []);
    const done = collect(child);
    await waitForLine(child, /^ready$/);
    const flushed = waitForLine(child, /^thread did flush$/);
    child.kill("SIGINT");
    await flushed;
    expect(child.exitCode).toBeNull();
    child.kill("SIGTERM");
    const result = await done;
    // The process ended only after the thread answered its close.
    expect(result.stdout).toContain("thread got close");
    expect(result.stdout.indexOf("thread did close")).toBeGreaterThan(result.stdout.indexOf("thread got close"));
    expect(result.stdout).toContain("in-process adapter closed budget=1000");
    expect(result.stdout).toContain("in-process adapter flushed");
    expect(result.signal).toBe("SIGTERM");
  });

  it("does not wait past the bound for a plugin thread that never answers a close", async () => {
    const child = startScript("tests/fixtures/bridge-on-signal.ts", [], { THREAD_MS: "60000" });
    const done = collect(child);
    await waitForLine(child, /^ready$/);
    const sent = Date.now();
    child.kill("SIGTERM");
    const result = await done;
    expect(result.stdout).toContain("thread got close");
    expect(result.stdout).not.toContain("thread did close");
    expect(result.signal).toBe("SIGTERM");
    // closeFlushMs 1000 + 1500 for the round trip + 500 of shutdown.ts's margin, plus teardown on a loaded machine.
    expect(Date.now() - sent).toBeLessThan(15_000);
  });
});
