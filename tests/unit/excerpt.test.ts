import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EXCERPT_BYTES, leafLineWithoutModel, toolResultExcerpt } from "../../src/core/excerpt.js";
import { batchAnswerCount, buildSummaryPrompt, NODE_BYTES, utf8Bytes } from "../../src/core/summary.js";

function log(lines: number, topic = "step"): string {
  return Array.from({ length: lines }, (_, i) => `${topic} ${i + 1}: value ${i * 7} ok in ${i % 13} ms`).join("\n");
}

describe("a tool result's excerpt line", () => {
  it("says what it is and how large the output is, names the tool, and keeps failure, last and first lines in order", () => {
    const output = `${log(40)}\nFAIL src/a.test.ts: expected 3, got 4\n${log(40, "later")}\nTests: 1 failed, 79 passed`;
    const line = toolResultExcerpt("bash", output);
    expect(utf8Bytes(line)).toBeLessThanOrEqual(EXCERPT_BYTES);
    expect(line).toMatch(/^tool_result: excerpt of [\d,]+ bytes, 82 lines \(zoom for all\): bash → /);
    const at = (text: string) => line.indexOf(text);
    expect(at("step 1: value 0")).toBeGreaterThan(0);
    expect(at("FAIL src/a.test.ts: expected 3, got 4")).toBeGreaterThan(at("step 1: value 0"));
    expect(at("Tests: 1 failed, 79 passed")).toBeGreaterThan(at("FAIL src/a.test.ts"));
    // Skipped stretches are marked, so the line never reads as the whole output.
    expect(line).toContain(" … ");
    expect(toolResultExcerpt("bash", output)).toBe(line);
  });

  it("prefers failure lines over the first lines when space runs out", () => {
    const wide = (i: number) => `row ${i} ${"x".repeat(120)}`;
    const rows = Array.from({ length: 30 }, (_, i) => wide(i));
    rows.splice(20, 0, "error: cannot open config/app.yaml (ENOENT)");
    const line = toolResultExcerpt("read", rows.join("\n"));
    expect(line).toContain("error: cannot open config/app.yaml (ENOENT)");
    expect(line).toContain("row 29");
    expect(utf8Bytes(line)).toBeLessThanOrEqual(NODE_BYTES);
  });

  it("recognises the usual ways tools report failure, and not ordinary words", () => {
    for (const failure of [
      "Error: boom",
      "npm ERR! code ELIFECYCLE",
      "Traceback (most recent call last):",
      "thread 'main' panicked at src/main.rs:3",
      "bash: foo: command not found",
      "Process exited with exit code 2",
      "permission denied",
      "connect ECONNREFUSED 127.0.0.1:5432",
    ]) {
      const output = `${log(30)}\n${failure}\n${log(30, "tail")}`;
      expect(toolResultExcerpt("bash", output), failure).toContain(failure);
    }
    const quiet = `${log(30)}\nexiting cleanly, everything else fine\n${log(30, "tail")}`;
    expect(toolResultExcerpt("bash", quiet)).not.toContain("exiting cleanly");
  });

  it("cuts a huge single line to its brief without reading it whole", () => {
    const line = toolResultExcerpt("read", "y".repeat(8 * 1024 * 1024));
    expect(line).toMatch(/^tool_result: excerpt of 8,388,608 bytes \(zoom for all\): read → y+…$/);
    expect(utf8Bytes(line)).toBeLessThanOrEqual(NODE_BYTES);
  });

  it("stays within its limit for any output and any tool name (property)", () => {
    fc.assert(
      fc.property(
        fc.option(fc.string({ maxLength: 40 }), { nil: null }),
        fc.array(fc.string({ unit: "grapheme", maxLength: 300 }), { maxLength: 60 }),
        fc.integer({ min: 64, max: NODE_BYTES }),
        (tool, lines, limit) => {
          const line = toolResultExcerpt(tool, lines.join("\n"), limit);
          expect(utf8Bytes(line)).toBeLessThanOrEqual(limit);
          expect(line.startsWith("tool_result: ")).toBe(true);
          expect(line).not.toContain("\n");
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("a leaf's line without a model", () => {
  const big = `${log(100)}\nFAIL x`;
  it("is the message itself when it fits a line, whatever the setting", () => {
    for (const mode of ["excerpt", "model"] as const)
      expect(leafLineWithoutModel({ kind: "tool_result", text: "3 files changed" }, mode)).toBe(
        "tool_result: 3 files changed",
      );
  });
  it("is a tool result's excerpt under 'excerpt', and none under 'model' (the model summarizes it)", () => {
    expect(leafLineWithoutModel({ kind: "tool_result", toolName: "bash", text: big }, "excerpt")).toBe(
      toolResultExcerpt("bash", big),
    );
    expect(leafLineWithoutModel({ kind: "tool_result", toolName: "bash", text: big }, "model")).toBeUndefined();
  });
  it("is none for a long message of another kind: the person's words and the agent's replies are summarized", () => {
    for (const kind of ["user", "assistant", "tool_call", "report", "note"])
      expect(leafLineWithoutModel({ kind, text: big }, "excerpt")).toBeUndefined();
  });
});

describe("an excerpt in a leaf run", () => {
  it("goes along as a <line> with its excerpt, shown for context and not answered", () => {
    const output = `${log(60)}\nFAIL x`;
    const excerpt = toolResultExcerpt("bash", output);
    const step = {
      type: "compress_batch",
      items: [
        { kind: "assistant", text: "a".repeat(700), kept: false },
        { kind: "tool_result", text: output, kept: true, line: excerpt },
        { kind: "user", text: "u".repeat(700), kept: false },
      ],
    } as const;
    const prompt = buildSummaryPrompt([], step);
    expect(prompt.step).toContain(`<line>${excerpt}</line>`);
    expect(prompt.step).not.toContain("step 30: value");
    expect(batchAnswerCount(step)).toBe(2);
  });
});
