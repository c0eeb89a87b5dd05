import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPrefixGate } from "../../src/compactor/prefix-gate.js";
import { createFakeSummarizer, parseFakeOptions } from "../../src/compactor/providers/fake.js";
import {
  type CallRecord,
  runStep,
  type StepContext,
  summarizeLeaf,
  summarizeParent,
} from "../../src/compactor/summarize.js";
import { type Summarizer, SummarizerError } from "../../src/compactor/summarizer.js";
import {
  buildSummaryPrompt,
  type ChatMessage,
  chunkText,
  cutToBytes,
  NODE_BYTES,
  promptMessages,
  SCALE_LINE,
  SIZE_TRIES,
  utf8Bytes,
} from "../../src/core/summary.js";
import { loopTurns } from "../helpers.js";

/** A summarizer that answers from a script and records every request it got (as plain messages). */
function scripted(
  answers: readonly string[],
  windowBytes = 64 * 1024,
  finishReason = "stop",
): Summarizer & { requests: ChatMessage[][] } {
  const requests: ChatMessage[][] = [];
  let n = 0;
  return {
    identity: "scripted",
    provider: "fake",
    model: "scripted",
    windowBytes,
    requests,
    async complete(prompt) {
      requests.push(promptMessages(prompt));
      const text = answers[Math.min(n++, answers.length - 1)] as string;
      return {
        text,
        finishReason,
        usage: { inputTokens: 100, cacheReadTokens: 60, cacheWriteTokens: 10, outputTokens: 5 },
      };
    },
  };
}

/** How the worker calls a step: as a leaf, recording every call. */
function ctxOf(summarizer: Summarizer, calls: CallRecord[] = []): StepContext {
  return { summarizer, purpose: "leaf", record: (call) => calls.push(call) };
}

describe("summary requests", () => {
  it("show a scale line of exactly NODE_BYTES and no ids or ranges", () => {
    expect(utf8Bytes(SCALE_LINE)).toBe(NODE_BYTES);
    const [system, user] = promptMessages(
      buildSummaryPrompt(["user: first line", "assistant: second\nline"], {
        type: "merge",
        left: "user: a",
        right: "assistant: b",
      }),
    );
    expect(system?.role).toBe("system");
    expect(user?.content).toContain("<chat>\nuser: first line\nassistant: second line\n</chat>");
    expect(user?.content).not.toMatch(/\d+\+\d+\|/);
  });

  it("cut text only at code point boundaries", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), fc.nat(600), (text, limit) => {
        const cut = cutToBytes(text, limit);
        expect(utf8Bytes(cut)).toBeLessThanOrEqual(limit);
        expect(text.startsWith(cut)).toBe(true);
        // No code point is cut in two: the prefix survives a UTF-8 round trip (a lone surrogate would not). The text
        // itself may hold U+FFFD (a generated grapheme), so the check is the round trip, not the character's absence.
        expect(new TextDecoder().decode(new TextEncoder().encode(cut))).toBe(cut);
      }),
    );
  });

  it("chunk a long message into parts that give the text back exactly", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 3000 }), fc.integer({ min: 8, max: 400 }), (text, max) => {
        const parts = chunkText(text, max);
        expect(parts.join("")).toBe(text);
        for (const part of parts) expect(utf8Bytes(part)).toBeLessThanOrEqual(max);
      }),
    );
  });
});

describe("size enforcement (seed 002 §4.3)", () => {
  it("retries in the same conversation, showing where the limit cuts, and keeps a line that fits", async () => {
    const long = `user: ${"wörd ".repeat(120)}`; // 2-byte characters, so the cut must respect code points
    const summarizer = scripted([long, "user: short enough"]);
    const result = await runStep(ctxOf(summarizer), ["assistant: context"], {
      type: "compress",
      kind: "user",
      text: "x".repeat(2000),
    });
    expect(result).toMatchObject({ text: "user: short enough", calls: 2, overshoot: false });
    const retry = summarizer.requests[1] as ChatMessage[];
    expect(retry.slice(0, 2)).toEqual(summarizer.requests[0]);
    expect(retry[2]).toEqual({ role: "assistant", content: long.trim() });
    const feedback = retry[3]?.content as string;
    expect(feedback).toContain(`That line is ${utf8Bytes(long.trim())} bytes; the limit is ${NODE_BYTES}.`);
    const shown = feedback.slice(feedback.indexOf("\n") + 1, feedback.lastIndexOf("| <- LIMIT"));
    expect(shown).toBe(cutToBytes(long.trim(), NODE_BYTES));
    expect(long.trim().startsWith(shown)).toBe(true);
  });

  it("keeps the shortest try after the retry limit and flags it", async () => {
    const summarizer = createFakeSummarizer({ overshootBytes: 40 });
    const result = await runStep(ctxOf(summarizer), [], {
      type: "compress",
      kind: "assistant",
      text: "word ".repeat(400),
    });
    expect(result.calls).toBe(SIZE_TRIES);
    expect(result.overshoot).toBe(true);
    expect(utf8Bytes(result.text)).toBe(NODE_BYTES + 40 - 5 * (SIZE_TRIES - 1));
  });

  it("writes lines of at most `lines` bytes when told to (fake:lines=N), where it otherwise fills them to the limit", async () => {
    const step = { type: "compress", kind: "assistant", text: "word ".repeat(400) } as const;
    const full = await runStep(ctxOf(createFakeSummarizer()), [], step);
    const short = await runStep(ctxOf(createFakeSummarizer(parseFakeOptions("fake:lines=250"))), [], step);
    expect(utf8Bytes(full.text)).toBeGreaterThan(NODE_BYTES - 10);
    expect(utf8Bytes(short.text)).toBeLessThanOrEqual(250);
    expect(utf8Bytes(short.text)).toBeGreaterThan(200);
    expect(short).toMatchObject({ calls: 1, overshoot: false });
    expect(() => parseFakeOptions("fake:lines=10")).toThrow(/OPTCHAT_SUMMARIZER: fake option lines=10/);
    expect(() => parseFakeOptions("fake:lines=")).toThrow(/whole number of bytes/);
  });

  it("fails on an empty answer instead of storing it", async () => {
    await expect(
      runStep(ctxOf(scripted(["   "])), [], { type: "compress", kind: "user", text: "x".repeat(900) }),
    ).rejects.toThrow(/empty line/);
  });
});

describe("answer checks (seed 002 §4.2–4.3, issue 13 item 6)", () => {
  const step = { type: "compress", kind: "user", text: "x".repeat(900) } as const;

  it("ask again in the same conversation when a line starts with a ref, and never keep that line", async () => {
    const summarizer = scripted(["12+4|user: wants the broker", "user: wants the broker"]);
    const calls: CallRecord[] = [];
    const result = await runStep(ctxOf(summarizer, calls), [], step);
    expect(result).toMatchObject({ text: "user: wants the broker", calls: 2 });
    expect(summarizer.requests[1]?.[2]).toEqual({ role: "assistant", content: "12+4|user: wants the broker" });
    expect(summarizer.requests[1]?.[3]?.content).toMatch(/starts with a reference/);
    expect(calls.map((c) => [c.purpose, c.outcome])).toEqual([
      ["leaf", "reference"],
      ["retry", "ok"],
    ]);
  });

  it("fail the step when every try starts with an id", async () => {
    const error = await runStep(ctxOf(scripted(["[3] user: x"])), [], step).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SummarizerError);
    expect((error as SummarizerError).kind).toBe("invalid");
  });

  it("fail the step at once on a refusal (text or content filter): the retry starts a fresh conversation", async () => {
    for (const [answer, finish] of [
      ["I'm sorry, but I can't help with summarizing this.", "stop"],
      ["user: fine line", "content-filter"],
    ] as const) {
      const summarizer = scripted([answer], 64 * 1024, finish);
      const calls: CallRecord[] = [];
      const error = await runStep(ctxOf(summarizer, calls), [], step).catch((e: unknown) => e);
      expect((error as SummarizerError).kind).toBe("refusal");
      expect(summarizer.requests).toHaveLength(1);
      expect(calls.map((c) => c.outcome)).toEqual(["refusal"]);
    }
  });

  it("record every call with its purpose, usage and outcome, the failed ones too", async () => {
    const calls: CallRecord[] = [];
    const long = `user: ${"word ".repeat(200)}`;
    await runStep(ctxOf(scripted([long, "user: ok"]), calls), [], step);
    expect(calls.map((c) => [c.purpose, c.outcome, c.usage.cacheReadTokens])).toEqual([
      ["leaf", "over_limit", 60],
      ["retry", "ok", 60],
    ]);
    const failing: Summarizer = {
      ...scripted([]),
      complete: async () => {
        throw new SummarizerError("scripted 429", { kind: "rate_limited", retryAfterMs: 3000 });
      },
    };
    const failed: CallRecord[] = [];
    await expect(runStep(ctxOf(failing, failed), [], step)).rejects.toThrow(/429/);
    expect(failed.map((c) => [c.purpose, c.outcome, c.usage.inputTokens])).toEqual([["leaf", "rate_limited", 0]]);
  });
});

describe("leaves and parents", () => {
  it("are free when they fit: verbatim leaf, children joined by a newline", async () => {
    const summarizer = scripted(["never used"]);
    expect(await summarizeLeaf(ctxOf(summarizer), [], "user", "use the broker")).toMatchObject({
      text: "user: use the broker",
      calls: 0,
    });
    expect(await summarizeParent(ctxOf(summarizer), [], "user: a", "assistant: b")).toMatchObject({
      text: "user: a\nassistant: b",
      calls: 0,
    });
    expect(summarizer.requests).toEqual([]);
  });

  it("summarize a message larger than the window through a recorded chunking tree over all of it", async () => {
    const summarizer = createFakeSummarizer({ windowBytes: 4096 });
    const text = Array.from({ length: 300 }, (_, i) => `line ${i}: build output with detail ${i * 7}`).join("\n");
    const result = await summarizeLeaf(ctxOf(summarizer), [], "tool_result", text);
    const leaves = result.chunks.filter((c) => c.chunkLevel === 0);
    expect(leaves.length).toBeGreaterThan(2);
    // The parts tile the whole message: nothing was clipped.
    expect(leaves[0]?.charStart).toBe(0);
    for (let k = 1; k < leaves.length; k++) expect(leaves[k]?.charStart).toBe(leaves[k - 1]?.charEnd);
    expect(leaves[leaves.length - 1]?.charEnd).toBe(text.length);
    const top = result.chunks[result.chunks.length - 1];
    expect(top).toMatchObject({ charStart: 0, charEnd: text.length, text: result.text });
    expect(utf8Bytes(result.text)).toBeLessThanOrEqual(NODE_BYTES);
    expect(result.calls).toBeGreaterThanOrEqual(leaves.length);
  });
});

describe("large messages (issue 9 item 3)", () => {
  const log = (bytes: number) => {
    const line = "build step passed with output café 部署\n";
    return line.repeat(Math.ceil(bytes / utf8Bytes(line)));
  };

  // The fake summarizer answers without waiting: before, a 64 MiB record's thousands of parts ran as one task, the
  // job's heartbeat timer never fired, and another worker took the job over.
  it("let the event loop turn between every step of a chunked leaf", async () => {
    const summarizer = createFakeSummarizer({ windowBytes: 8 * 1024 });
    const probe = loopTurns();
    const result = await summarizeLeaf(ctxOf(summarizer), [], "tool_result", log(512 * 1024));
    const turns = probe.stop();
    expect(result.chunks.filter((c) => c.chunkLevel === 0).length).toBeGreaterThan(100);
    expect(turns).toBeGreaterThanOrEqual(result.calls);
  });

  it("cost model calls and input bytes in proportion to their size", async () => {
    const summarizer = createFakeSummarizer();
    const small = await summarizeLeaf(ctxOf(summarizer), [], "tool_result", log(1024 * 1024));
    const large = await summarizeLeaf(ctxOf(summarizer), [], "tool_result", log(8 * 1024 * 1024));
    // Every part is sent once and the merges are one fewer than the parts: 8x the text is 8x the work.
    expect(large.calls / small.calls).toBeGreaterThan(7.5);
    expect(large.calls / small.calls).toBeLessThan(8.5);
    expect(large.inputBytes / small.inputBytes).toBeGreaterThan(7.5);
    expect(large.inputBytes / small.inputBytes).toBeLessThan(8.5);
    expect(large.chunks.at(-1)).toMatchObject({ charStart: 0, charEnd: log(8 * 1024 * 1024).length });
  });
});

describe("the prefix gate (issue 13 item 3)", () => {
  it("sends a tree's next call once the previous one has started answering, and never holds other trees", async () => {
    const gate = createPrefixGate(10_000);
    const order: string[] = [];
    let answerFirst = () => {};
    const first = gate.enter("tree-1").then((answered) => {
      order.push("first sent");
      answerFirst = () => {
        order.push("first answering");
        answered();
      };
    });
    await first;
    const second = gate.enter("tree-1").then((answered) => {
      order.push("second sent");
      answered();
    });
    const other = gate.enter("tree-2").then((answered) => {
      order.push("other tree sent");
      answered();
    });
    await other;
    expect(order).toEqual(["first sent", "other tree sent"]);
    answerFirst();
    await second;
    expect(order).toEqual(["first sent", "other tree sent", "first answering", "second sent"]);
  });

  it("waits at most its bound for a call that never answers", async () => {
    const gate = createPrefixGate(50);
    await gate.enter("tree-1");
    const started = performance.now();
    await gate.enter("tree-1");
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
  });
});
