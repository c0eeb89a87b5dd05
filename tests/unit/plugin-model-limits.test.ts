import { describe, expect, it } from "vitest";
import { type Limits, ModelLimits, type RememberedLimits } from "../../plugin/request/model-limits.js";

/** A lookup through OpenCode's client that answers `answer` and counts its calls. */
function countingLookup(answer: Limits | undefined) {
  const calls: string[] = [];
  const lookup = async (providerId: string, modelId: string) => {
    calls.push(`${providerId}/${modelId}`);
    return answer;
  };
  return { calls, lookup };
}

describe("the models' limits", () => {
  it("in a process of its own: learned from chat.params or looked up once, and always confirmed", async () => {
    const { calls, lookup } = countingLookup({ context: 200_000, output: 8_000 });
    const limits = new ModelLimits(lookup);
    expect(await limits.of("anthropic", "claude")).toEqual({
      limits: { context: 200_000, output: 8_000 },
      confirmed: true,
    });
    expect(await limits.of("anthropic", "claude")).toEqual({
      limits: { context: 200_000, output: 8_000 },
      confirmed: true,
    });
    expect(calls).toEqual(["anthropic/claude"]);
    limits.note("openai", "gpt", { context: 128_000 });
    expect(await limits.of("openai", "gpt")).toEqual({ limits: { context: 128_000, output: 4096 }, confirmed: true });
    expect(calls).toEqual(["anthropic/claude"]);
    // A lookup that finds nothing is not kept: the next request asks again.
    const none = countingLookup(undefined);
    const unknown = new ModelLimits(none.lookup);
    expect(await unknown.of("p", "m")).toBeUndefined();
    expect(await unknown.of("p", "m")).toBeUndefined();
    expect(none.calls).toEqual(["p/m", "p/m"]);
  });

  it("served by the local server: a later process of the directory takes what an earlier one learned, unconfirmed, without a lookup", async () => {
    const store: RememberedLimits = new Map();
    const first = countingLookup({ context: 100_000, output: 4_000 });
    await new ModelLimits(first.lookup, { store, directory: "/work/a" }).of("fake", "fake");
    expect(first.calls).toEqual(["fake/fake"]);

    const second = countingLookup({ context: 100_000, output: 4_000 });
    const later = new ModelLimits(second.lookup, { store, directory: "/work/a" });
    later.prefetch("fake", "fake");
    expect(await later.of("fake", "fake")).toEqual({
      limits: { context: 100_000, output: 4_000 },
      confirmed: false,
    });
    expect(second.calls).toEqual([]);
    // chat.params passes the real limits: confirmed from then on, and remembered for the next process.
    later.note("fake", "fake", { context: 8_000, output: 1_000 });
    expect(await later.of("fake", "fake")).toEqual({ limits: { context: 8_000, output: 1_000 }, confirmed: true });
    const third = countingLookup(undefined);
    expect(await new ModelLimits(third.lookup, { store, directory: "/work/a" }).of("fake", "fake")).toEqual({
      limits: { context: 8_000, output: 1_000 },
      confirmed: false,
    });

    // Another directory may configure the same model id otherwise (its own opencode.json): it looks up its own.
    const elsewhere = countingLookup({ context: 32_000, output: 2_000 });
    expect(await new ModelLimits(elsewhere.lookup, { store, directory: "/work/b" }).of("fake", "fake")).toEqual({
      limits: { context: 32_000, output: 2_000 },
      confirmed: true,
    });
    expect(elsewhere.calls).toEqual(["fake/fake"]);
  });
});
