import { describe, expect, it } from "vitest";
import { isOptchatError } from "../../src/core/errors.js";
import { databaseFailureOf, databaseUnavailable, RETRYABLE_SQLSTATES, withRetry } from "../../src/store/db.js";

const URL = "postgres://postgres@127.0.0.1:5432/optchat_x";

/** An error as node-postgres builds it for a server error (a DatabaseError carries the SQLSTATE as `code`). */
function serverError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code, severity: "FATAL" });
}

/** A fake clock whose sleeps advance it, so bounded retries run instantly and exactly. */
function fakeClock() {
  let now = 0;
  const sleeps: number[] = [];
  return {
    now: () => now,
    sleep: async (ms: number) => {
      sleeps.push(ms);
      now += ms;
    },
    sleeps,
  };
}

describe("which database errors are retried", () => {
  it.each([
    ["57P03 the database system is starting up", serverError("57P03", "the database system is starting up")],
    ["57P01 administrator command", serverError("57P01", "terminating connection due to administrator command")],
    ["57P02 crash shutdown", serverError("57P02", "terminating connection because of crash of another server process")],
    ["08006 connection failure", serverError("08006", "connection failure")],
    ["ECONNREFUSED", Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5999"), { code: "ECONNREFUSED" })],
    ["ECONNRESET", Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })],
    ["Connection terminated unexpectedly", new Error("Connection terminated unexpectedly")],
    ["pool timeout", new Error("timeout exceeded when trying to connect")],
    [
      "AggregateError of several addresses",
      new AggregateError([Object.assign(new Error("connect ECONNREFUSED ::1:5999"), { code: "ECONNREFUSED" })], ""),
    ],
    ["pg-boss wrapping", new Error("boss failed", { cause: new Error("Connection terminated unexpectedly") })],
  ])("%s is the database being unavailable", (_name, error) => {
    expect(databaseFailureOf(error)).toBe("unavailable");
  });

  it("retries conflicts always, and never real errors (syntax, constraint, 22003, 3D000)", () => {
    for (const [state, entry] of Object.entries(RETRYABLE_SQLSTATES)) {
      expect(databaseFailureOf(serverError(state, entry.name))).toBe(entry.failure);
    }
    expect(databaseFailureOf(serverError("40001", "could not serialize"))).toBe("conflict");
    for (const state of ["42601", "23505", "22003", "3D000", "28P01"]) {
      expect(databaseFailureOf(serverError(state, "x"))).toBeUndefined();
    }
    expect(databaseFailureOf(new TypeError("x is undefined"))).toBeUndefined();
  });
});

describe("withRetry", () => {
  const policy = { databaseUrl: URL, unavailableRetryMs: 5_000 };

  it("runs an idempotent operation again while the database is unavailable, then returns its result", async () => {
    const clock = fakeClock();
    let calls = 0;
    const result = await withRetry(
      async () => {
        calls += 1;
        if (calls < 4) throw serverError("57P03", "the database system is starting up");
        return "stored";
      },
      { idempotent: true, policy, now: clock.now, sleep: clock.sleep },
    );
    expect(result).toBe("stored");
    expect(calls).toBe(4);
    expect(clock.sleeps).toHaveLength(3);
  });

  it("gives up after the configured time with DATABASE_UNAVAILABLE naming the server, the fix and the setting", async () => {
    const clock = fakeClock();
    let calls = 0;
    const error = await withRetry(
      async () => {
        calls += 1;
        throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
      },
      { idempotent: true, policy, now: clock.now, sleep: clock.sleep },
    ).catch((e: unknown) => e);
    expect(isOptchatError(error, "DATABASE_UNAVAILABLE")).toBe(true);
    expect((error as Error).message).toMatch(
      /^Cannot reach PostgreSQL at 127\.0\.0\.1:5432\/optchat_x: connect ECONNREFUSED .*docker compose up -d db.*retried for 5000 ms \(raise OPTCHAT_DATABASE_RETRY_MS/,
    );
    expect(clock.now()).toBe(5_000); // the last wait is cut to the bound
    expect(calls).toBeGreaterThan(3);
    expect(Math.max(...clock.sleeps)).toBeLessThanOrEqual(1_250);
  });

  it("does not run a non-idempotent operation again: DATABASE_UNAVAILABLE at once", async () => {
    const clock = fakeClock();
    let calls = 0;
    const error = await withRetry(
      async () => {
        calls += 1;
        throw new Error("Connection terminated unexpectedly");
      },
      { idempotent: false, policy, now: clock.now, sleep: clock.sleep },
    ).catch((e: unknown) => e);
    expect(isOptchatError(error, "DATABASE_UNAVAILABLE")).toBe(true);
    expect(calls).toBe(1);
  });

  it("retries conflicts a bounded number of times and passes real errors on unchanged", async () => {
    const clock = fakeClock();
    let calls = 0;
    const conflict = serverError("40001", "could not serialize access");
    await expect(
      withRetry(
        async () => {
          calls += 1;
          throw conflict;
        },
        { idempotent: true, policy, conflictAttempts: 3, now: clock.now, sleep: clock.sleep },
      ),
    ).rejects.toBe(conflict);
    expect(calls).toBe(3);
    const real = serverError("23505", "duplicate key");
    await expect(withRetry(async () => Promise.reject(real), { idempotent: true, policy })).rejects.toBe(real);
  });

  it("maps a server's refusal of the connection (database dropped, login revoked) without retrying it", async () => {
    let calls = 0;
    const error = await withRetry(
      async () => {
        calls += 1;
        throw serverError("3D000", 'database "optchat_x" does not exist');
      },
      { idempotent: true, policy },
    ).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "DATABASE_UNAVAILABLE", details: { sqlState: "3D000" } });
    expect((error as Error).message).toMatch(/run `optchat migrate`/);
    expect(calls).toBe(1);
  });

  it("without a policy passes an unavailable database's error on unchanged (withTransaction's callers decide)", async () => {
    const lost = new Error("Connection terminated unexpectedly");
    await expect(withRetry(async () => Promise.reject(lost), { idempotent: true })).rejects.toBe(lost);
  });
});

describe("databaseUnavailable", () => {
  it("tells a missing database (the server answers) from a server that is down", () => {
    const missing = databaseUnavailable(URL, serverError("3D000", 'database "optchat_x" does not exist'));
    expect(missing.message).toMatch(
      /^No database "optchat_x" on the PostgreSQL server at 127\.0\.0\.1:5432: run `optchat migrate`/,
    );
    expect(missing.message).not.toMatch(/docker compose/);
    const down = databaseUnavailable(URL, Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
    expect(down.message).toMatch(/Start it \(docker compose up -d db\)/);
    const crowded = databaseUnavailable(URL, serverError("53300", "sorry, too many clients already"));
    expect(crowded.message).toMatch(/too many clients already\. Lower OPTCHAT_POOL_SIZE .* max_connections/);
    expect(crowded.message).not.toMatch(/docker compose/);
    const login = databaseUnavailable(URL, serverError("28P01", "password authentication failed"));
    expect(login.message).toMatch(
      /refused the login: password authentication failed\. Fix the user or password in DATABASE_URL/,
    );
  });
});
