import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LineReader } from "../../plugin/json-lines.js";
import { localServerWanted, serverPaths, serversDirectory, settingsEnv } from "../../plugin/local-server-client.js";

/** Which OpenCode processes use the local server, and what makes two processes share one (plugin/local-server-client.ts). */
describe("the local server's client", () => {
  const run = ["bun", "/$bunfs/root/src/index.js", "run", "hi"];
  const tui = ["bun", "/$bunfs/root/src/index.js"];
  const serve = ["bun", "/$bunfs/root/src/index.js", "serve", "--port", "0"];

  it("is used by `opencode run` under auto (the default), by every process under on, by none under off", () => {
    expect(localServerWanted(undefined, run)).toBe(true);
    expect(localServerWanted("", run)).toBe(true);
    expect(localServerWanted("auto", ["bun", "x", "--print-logs", "run", "hi"])).toBe(true);
    expect(localServerWanted("auto", tui)).toBe(false);
    expect(localServerWanted("auto", serve)).toBe(false);
    // A prompt that says "run" is not the command.
    expect(localServerWanted("auto", ["bun", "x", "serve", "run"])).toBe(false);
    expect(localServerWanted("on", serve)).toBe(true);
    expect(localServerWanted("off", run)).toBe(false);
    // An invalid value is refused by the configuration check, which runs in the thread: no server for it.
    expect(localServerWanted("sometimes", run)).toBe(false);
    // It listens on a Unix socket.
    expect(localServerWanted("on", run, "win32")).toBe(false);
  });

  it("keys a server by the settings' environment only: the database, optchat's and the driver's variables", () => {
    const picked = settingsEnv({
      DATABASE_URL: "postgres://a",
      OPTCHAT_MODE: "augment",
      PGHOST: "h",
      ANTHROPIC_API_KEY: "k",
      PATH: "/bin",
      HOME: "/home/x",
      OPENCODE_X: "1",
      OPTCHAT_UNSET: undefined,
    });
    expect(picked).toEqual({
      ANTHROPIC_API_KEY: "k",
      DATABASE_URL: "postgres://a",
      OPTCHAT_MODE: "augment",
      PGHOST: "h",
    });
    expect(Object.keys(picked)).toEqual([...Object.keys(picked)].sort());
  });

  it("gives each identity its own socket in a private directory, the same one each time", () => {
    const a = serverPaths("identity-a");
    expect(serverPaths("identity-a")).toEqual(a);
    expect(serverPaths("identity-b").socket).not.toBe(a.socket);
    expect(a.socket).toMatch(/optchat-[^/]+\/[0-9a-f]{20}\.sock$/);
    expect(a.log).toBe(a.socket.replace(/\.sock$/, ".log"));
  });
});

describe("the local servers' directory", () => {
  it("is refused when others may use it: the process then runs its own thread", () => {
    const previous = process.env.TMPDIR;
    const scratch = mkdtempSync(join(tmpdir(), "optchat-dir-"));
    try {
      process.env.TMPDIR = scratch;
      const directory = serversDirectory();
      expect(directory.startsWith(scratch)).toBe(true);
      serverPaths("x");
      expect(statSync(directory).mode & 0o777).toBe(0o700);
      chmodSync(directory, 0o777);
      expect(() => serverPaths("x")).toThrow(/is not private to this user/);
    } finally {
      process.env.TMPDIR = previous;
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

describe("the local server's lines", () => {
  it("keeps a line until its newline arrives and a character split across chunks whole", () => {
    const reader = new LineReader();
    const text = Buffer.from('{"a":"日本"}\n{"b":1}\n{"c"', "utf8");
    const cut = text.indexOf(Buffer.from("本")) + 1;
    expect(reader.push(text.subarray(0, cut))).toEqual([]);
    expect(reader.push(text.subarray(cut))).toEqual(['{"a":"日本"}', '{"b":1}']);
    expect(reader.push(Buffer.from(":2}\n"))).toEqual(['{"c":2}']);
  });
});
