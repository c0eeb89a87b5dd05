import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { holderIsDead, leaseHolderName } from "../../plugin/turns/lease.js";

/** Lease holders of this machine: a dead one is taken over at once, a live one never (its pid may be reused). */

describe("lease holder liveness", () => {
  it("says this process is alive, under its own name", () => {
    expect(holderIsDead(leaseHolderName())).toBe(false);
  });

  it("says a holder whose pid now belongs to a process started at another time is dead", () => {
    const [host, machine, processPart, random] = leaseHolderName().split(":");
    const [pid, start] = (processPart as string).split("@");
    // Linux has /proc (this machine and CI); elsewhere the pid alone decides, as in the next test.
    if (process.platform !== "linux") return;
    expect(start).toMatch(/^\d+$/);
    const earlier = `${host}:${machine}:${pid}@${Number(start) - 1}:${random}`;
    expect(holderIsDead(earlier)).toBe(true);
  });

  it("says a holder whose process has exited is dead", async () => {
    const child = spawn(process.execPath, ["-e", ""]);
    const pid = child.pid as number;
    await new Promise((resolve) => child.once("exit", resolve));
    expect(holderIsDead(`opencode:${hostname()}:${pid}@1:abc`)).toBe(true);
    expect(holderIsDead(`opencode:${hostname()}:${pid}:abc`)).toBe(true);
  });

  it("never declares another machine's holder, or one it cannot read, dead", () => {
    expect(holderIsDead("opencode:another-machine:1@1:abc")).toBe(false);
    expect(holderIsDead("optchat-cli:x:1:abc")).toBe(false);
    expect(holderIsDead(`opencode:${hostname()}:not-a-pid:abc`)).toBe(false);
    // The old form without a start time: the pid alone decides (pid 1 exists).
    expect(holderIsDead(`opencode:${hostname()}:1:abc`)).toBe(false);
  });
});
