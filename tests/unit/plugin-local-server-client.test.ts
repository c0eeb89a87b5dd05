import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  localServerWanted,
  serverPaths,
  serversDirectory,
  settingsEnv,
} from "../../plugin/transport/local-server/client.js";
import { LineReader } from "../../plugin/transport/local-server/json-lines.js";
import { findExecutable, nodeSupported, serverCommand } from "../../plugin/transport/local-server/runtime.js";

/** Which OpenCode processes use the local server, and what makes two processes share one (plugin/transport/local-server/client.ts). */
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
      // Assigning undefined would set the string "undefined" (and later tests' temporary files would go there).
      if (previous === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = previous;
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

describe("the local server's runtime", () => {
  const entry = new URL("file:///opt/optchat/plugin/transport/local-server/entry.ts");
  const opencode = { execPath: "/usr/bin/opencode", platform: "linux" as const };
  let scratch: string;

  /** A directory holding a `node` that answers `--version` with `version`; returns the directory. */
  function fakeNode(name: string, version: string): string {
    const directory = join(scratch, name);
    mkdirSync(directory);
    writeFileSync(join(directory, "node"), `#!/bin/sh\necho ${version}\n`);
    chmodSync(join(directory, "node"), 0o755);
    return directory;
  }

  beforeEach(() => {
    scratch = mkdtempSync(join(tmpdir(), "optchat-runtime-"));
  });
  afterEach(() => rmSync(scratch, { recursive: true, force: true }));

  it("is Node.js 20.6 or later from PATH under auto, through its entry module, with the environment as given", async () => {
    const empty = join(scratch, "empty");
    mkdirSync(empty);
    const modern = fakeNode("modern", "v22.1.0");
    const env = { PATH: `${empty}:${modern}:${fakeNode("later", "v24.0.0")}`, OPTCHAT_MODE: "augment" };
    const command = await serverCommand("auto", env, entry, opencode);
    expect(command).toEqual({
      runtime: "node",
      command: join(modern, "node"),
      args: ["/opt/optchat/plugin/transport/local-server/node.mjs"],
      env,
    });
  });

  it("is OpenCode's own Bun under auto when PATH has no node, or one older than 20.6, and always under bun", async () => {
    const bun = {
      runtime: "bun",
      command: "/usr/bin/opencode",
      args: ["/opt/optchat/plugin/transport/local-server/entry.ts"],
      env: { PATH: expect.any(String), BUN_BE_BUN: "1" },
    };
    expect(await serverCommand("auto", { PATH: fakeNode("old", "v20.5.1") }, entry, opencode)).toEqual(bun);
    expect(await serverCommand("auto", { PATH: join(scratch, "missing") }, entry, opencode)).toEqual(bun);
    expect(await serverCommand("bun", { PATH: fakeNode("modern", "v22.1.0") }, entry, opencode)).toEqual(bun);
  });

  it("under node, says what it found and which setting to change when it cannot be Node.js", async () => {
    await expect(serverCommand("node", { PATH: join(scratch, "missing") }, entry, opencode)).rejects.toThrow(
      "localServerRuntime is node, but no node is on PATH: the local server needs Node.js 20.6 or later (or set OPTCHAT_LOCAL_SERVER_RUNTIME=bun)",
    );
    const old = fakeNode("old", "v18.19.0");
    await expect(serverCommand("node", { PATH: old }, entry, opencode)).rejects.toThrow(
      `${join(old, "node")} is Node.js v18.19.0`,
    );
  });

  it("compares versions by major and minor, and finds only executable files", () => {
    expect(["v20.6.0", "v20.19.5", "v21.0.0", "v24.1.0", "20.6.0\n"].map(nodeSupported)).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(["v20.5.9", "v18.20.0", "v9.11.2", "", "garbage"].map(nodeSupported)).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
    const directory = join(scratch, "bin");
    mkdirSync(directory);
    writeFileSync(join(directory, "node"), "not executable");
    mkdirSync(join(directory, "sub"));
    expect(findExecutable("node", `${directory}::${join(scratch, "none")}`)).toBeUndefined();
    expect(findExecutable("sub", directory)).toBeUndefined();
    chmodSync(join(directory, "node"), 0o755);
    expect(findExecutable("node", `::${directory}`)).toBe(join(directory, "node"));
  });
});
