import { describe, expect, it } from "vitest";
import { runBatch } from "../../src/compactor/batch-step.js";
import { createFakeSummarizer } from "../../src/compactor/providers/fake.js";
import type { CallRecord } from "../../src/compactor/summarize.js";
import type { Summarizer } from "../../src/compactor/summarizer.js";
import { NODE_BYTES, promptMessages } from "../../src/core/summary.js";

/** A summarizer that answers the scripted texts in order (and records each request's last user message). */
function scripted(answers: string[]): { summarizer: Summarizer; seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    summarizer: {
      identity: "scripted/1",
      provider: "scripted",
      model: "scripted",
      windowBytes: 64 * 1024,
      async complete(prompt) {
        seen.push(promptMessages(prompt).at(-1)?.content ?? "");
        const text = answers.shift() ?? "";
        return {
          text,
          usage: { inputTokens: 10, cacheReadTokens: 0, cacheWriteTokens: 0, outputTokens: 5 },
          finishReason: "stop",
        };
      },
    },
  };
}

const items = [
  { kind: "tool_result", text: `output ${"x".repeat(600)}`, kept: false },
  { kind: "user", text: "short", kept: true },
  { kind: "assistant", text: `reply ${"y".repeat(600)}`, kept: false },
];

describe("a batch step (several messages or merges in one call)", () => {
  it("asks for one line per message, shows short ones for context only, and takes each line", async () => {
    const { summarizer, seen } = scripted(["tool_result: ran it\nassistant: replied"]);
    const calls: CallRecord[] = [];
    const answer = await runBatch({ summarizer, purpose: "leaf", record: (c) => calls.push(c) }, ["earlier line"], {
      type: "compress_batch",
      items,
    });
    expect(answer).toMatchObject({ lines: ["tool_result: ran it", "assistant: replied"], calls: 1 });
    expect(seen[0]).toContain("Answer with exactly 2 lines, one per <message>");
    expect(seen[0]).toContain("<line>user: short</line>");
    expect(calls.map((c) => [c.purpose, c.outcome])).toEqual([["leaf", "ok"]]);
  });

  it("asks again when the line count is wrong, then gives up line by line", async () => {
    const again = scripted(["only one line", "tool_result: a\nassistant: b"]);
    const calls: CallRecord[] = [];
    const fixed = await runBatch({ summarizer: again.summarizer, purpose: "leaf", record: (c) => calls.push(c) }, [], {
      type: "compress_batch",
      items,
    });
    expect(fixed).toMatchObject({ lines: ["tool_result: a", "assistant: b"], calls: 2 });
    expect(calls.map((c) => [c.purpose, c.outcome])).toEqual([
      ["leaf", "line_count"],
      ["retry", "ok"],
    ]);
    expect(again.seen[1]).toContain("exactly 2 are needed");
    const never = scripted(["one", "still one"]);
    expect(
      await runBatch({ summarizer: never.summarizer, purpose: "leaf" }, [], { type: "compress_batch", items }),
    ).toMatchObject({ lines: [undefined, undefined], calls: 2 });
  });

  it("leaves a line over the limit or starting with a reference to be made alone; fails on a refusal", async () => {
    const { summarizer } = scripted([`tool_result: ${"z".repeat(NODE_BYTES)}\n12+4|assistant: b`]);
    const answer = await runBatch({ summarizer, purpose: "merge" }, [], {
      type: "merge_batch",
      pairs: [
        { left: "a", right: "b" },
        { left: "c", right: "d" },
      ],
    });
    expect(answer.lines).toEqual([undefined, undefined]);
    const refusing = scripted(["I'm sorry, I can't help with that."]);
    await expect(
      runBatch({ summarizer: refusing.summarizer, purpose: "leaf" }, [], { type: "compress_batch", items }),
    ).rejects.toMatchObject({ kind: "refusal" });
  });

  it("is answered by the fake (and so the scripted model) as the single steps would be, line for line", async () => {
    const fake = createFakeSummarizer();
    const batch = await runBatch({ summarizer: fake, purpose: "leaf" }, [], { type: "compress_batch", items });
    expect(batch.lines).toHaveLength(2);
    expect(batch.lines[0]).toMatch(/^tool_result: output x+/);
    expect(batch.lines[1]).toMatch(/^assistant: reply y+/);
    for (const line of batch.lines) expect(Buffer.byteLength(line ?? "")).toBeLessThanOrEqual(NODE_BYTES);
  });
});
