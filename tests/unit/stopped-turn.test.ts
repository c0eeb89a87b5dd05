import { describe, expect, it } from "vitest";
import { expandFolded } from "../../src/core/checkpoint-lines.js";
import { estimateTokens } from "../../src/core/context.js";
import { renderStoppedTurn, type StoppedTurnRecord, stoppedTurnOf } from "../../src/core/stopped-turn.js";

/** A turn of `n` bash steps (call then result), then a failed request's note; the last call optionally unanswered. */
function records(n: number, unanswered = false): StoppedTurnRecord[] {
  const out: StoppedTurnRecord[] = [
    { seq: 10, kind: "user", toolCallId: null, toolName: null, head: "do the task", byteLength: 11 },
  ];
  let seq = 11;
  for (let k = 1; k <= n; k++) {
    const command = JSON.stringify({ tool: "bash", input: { command: `run step ${k}` } });
    out.push({ seq: seq++, kind: "tool_call", toolCallId: `c${k}`, toolName: "bash", head: command, byteLength: 40 });
    if (unanswered && k === n) break;
    const head = `STEP ${k}/${n} DONE\nfiller line ${k}`;
    out.push({ seq: seq++, kind: "tool_result", toolCallId: `c${k}`, toolName: "bash", head, byteLength: 4096 });
  }
  out.push({
    seq: seq++,
    kind: "note",
    toolCallId: null,
    toolName: null,
    head: "The model request failed: <too long>",
    byteLength: 30,
  });
  return out;
}

describe("a stopped turn's hand-on (issue 36)", () => {
  it("pairs every call with its result, keeps the error, and marks a call that never got its result", () => {
    const stopped = stoppedTurnOf("interrupted", records(4, true).slice(1));
    expect(stopped.errors).toEqual(["The model request failed: <too long>"]);
    expect(stopped.steps).toHaveLength(4);
    expect(stopped.steps[0]?.[0]).toMatchObject({ ref: "12+1", tool: "bash", args: '{"command":"run step 1"}' });
    expect(stopped.steps[0]?.[0]?.result).toContain("STEP 1/4 DONE");
    // The unanswered call points at its call record and says it has no result.
    expect(stopped.steps[3]?.[0]).toMatchObject({ ref: "17+1", failed: true });
    expect(stopped.steps[3]?.[0]?.result).toMatch(/no result stored/);
    const pieces = renderStoppedTurn(stopped, 10_000);
    expect(pieces[0]).toBe('<stopped_turn state="interrupted" calls="4">');
    expect(pieces.join("\n")).toContain("error: The model request failed: &lt;too long&gt;");
  });

  it("names every finished step within its cap: the earlier calls fold coarser, the last three stay at full detail", () => {
    for (const [n, cap] of [
      [12, 100_000],
      [200, 3_000],
      [1000, 2_000],
    ] as const) {
      const pieces = renderStoppedTurn(stoppedTurnOf("failed", records(n).slice(1)), cap);
      const lines = pieces.filter((p) => /^(\{|\d)/.test(p)).flatMap(expandFolded);
      expect(lines).toHaveLength(n);
      for (let k = 1; k <= n; k++) expect(lines[k - 1]).toContain(`STEP ${k}/${n} DONE`);
      // The refs, folded or not, are the results' own refs in order.
      expect(lines.map((l) => l.split("|")[0])).toEqual(Array.from({ length: n }, (_, i) => `${12 + 2 * i}+1`));
      expect(lines.slice(-3).every((l) => l.includes("run step"))).toBe(true);
      if (n > 12) expect(estimateTokens(pieces.join("\n"))).toBeLessThanOrEqual(cap);
    }
  });
});
