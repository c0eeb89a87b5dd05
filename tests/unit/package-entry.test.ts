import { describe, expect, it } from "vitest";
import entry, { isV2Context } from "../../plugin/package-entry.js";

/**
 * The npm package's entry (issue 44): one default export for both OpenCode lines, each half acting only under its own
 * host. V1 1.18.33 calls `server()` and then `setup()` with a context of its own (the keys below, read from its
 * binary); V2 2.1.2 calls only `setup()`, with session hooks and the bus (docs/opencode-v2-notes.md).
 */
const fn = () => undefined;
const v1SetupContext = {
  options: {},
  agent: { transform: fn, reload: fn },
  aisdk: { sdk: fn, language: fn },
  catalog: { transform: fn, reload: fn },
  command: { transform: fn, reload: fn },
  integration: { transform: fn, reload: fn, connection: { active: fn, resolve: fn } },
  plugin: { add: fn, remove: fn },
  reference: { transform: fn, reload: fn },
  skill: { transform: fn, reload: fn },
};

describe("the package entry", () => {
  it("has what V1 requires of a package (an id and server()) and what V2 requires (setup())", () => {
    expect(entry.id).toBe("optchat");
    expect(typeof entry.server).toBe("function");
    expect(typeof entry.setup).toBe("function");
  });

  it("tells V2's context from V1's", () => {
    expect(isV2Context(v1SetupContext)).toBe(false);
    expect(isV2Context({ ...v1SetupContext, session: { hook: fn }, event: { subscribe: fn } })).toBe(true);
    expect(isV2Context(undefined)).toBe(false);
    expect(isV2Context({ session: { hook: fn } })).toBe(false);
  });

  it("does nothing when V1 calls setup()", async () => {
    expect(await entry.setup(v1SetupContext)).toBeUndefined();
  });
});
