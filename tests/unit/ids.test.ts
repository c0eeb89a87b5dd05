import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { eventKeyOf, opaqueIdProblem, parseEventKey, sessionIdFromRandom, stageKeyOf } from "../../src/core/ids.js";

const hostId = fc.string({ minLength: 1, maxLength: 12 });
const finalization = fc.record({
  hostSessionId: hostId,
  messageId: hostId,
  partId: fc.option(hostId, { nil: undefined }),
  revision: fc.nat(5),
});

describe("finalization keys", () => {
  it("are injective: different host coordinates never share a key", () => {
    fc.assert(
      fc.property(finalization, finalization, (a, b) => {
        const same =
          a.hostSessionId === b.hostSessionId &&
          a.messageId === b.messageId &&
          (a.partId ?? "") === (b.partId ?? "") &&
          a.revision === b.revision;
        expect(eventKeyOf(a) === eventKeyOf(b)).toBe(same);
      }),
      { numRuns: 5000 },
    );
  });

  it("give back the host coordinates they were made from (export names records by them)", () => {
    const unicodeId = fc.string({ minLength: 1, maxLength: 12, unit: "grapheme" });
    const anyKey = fc.record({
      hostSessionId: fc.oneof(hostId, unicodeId, fc.constantFrom("a/b", "x#1", "%2F", "ses_1")),
      messageId: fc.oneof(hostId, unicodeId),
      partId: fc.option(fc.oneof(hostId, unicodeId), { nil: undefined }),
      revision: fc.nat(1000),
    });
    fc.assert(
      fc.property(anyKey, (key) => {
        const { partId, ...rest } = key;
        expect(parseEventKey(eventKeyOf(key))).toEqual(partId === undefined || partId === "" ? rest : key);
      }),
      { numRuns: 2000 },
    );
    expect(parseEventKey("not a key")).toBeUndefined();
    expect(parseEventKey("a/b#1")).toBeUndefined();
  });

  it("share their stage key across revisions only", () => {
    fc.assert(
      fc.property(finalization, fc.nat(5), (key, revision) => {
        expect(stageKeyOf({ ...key, revision })).toBe(stageKeyOf(key));
        expect(eventKeyOf({ ...key, revision }) === eventKeyOf(key)).toBe(revision === key.revision);
      }),
    );
  });
});

describe("opaque IDs", () => {
  it.each([
    "/home/me/project",
    "../x",
    "a/b",
    "a\\b",
    ".hidden",
    "a..b",
    "",
    "x".repeat(201),
    "with space",
  ])("rejects %j", (id) => {
    expect(opaqueIdProblem(id)).toBeDefined();
  });
  it.each(["ses_01h2x", "prj_abc123", "project:prj_1", "turn-7.2"])("accepts %j", (id) => {
    expect(opaqueIdProblem(id)).toBeUndefined();
  });
  it("generates valid, distinct session IDs from random bytes", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        (a, b) => {
          const idA = sessionIdFromRandom(a);
          expect(opaqueIdProblem(idA)).toBeUndefined();
          expect(idA).toMatch(/^mem_[0-9a-z]{26}$/);
          expect(idA === sessionIdFromRandom(b)).toBe(Buffer.from(a).equals(Buffer.from(b)));
        },
      ),
    );
  });
});
