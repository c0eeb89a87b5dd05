import { describe, expect, it } from "vitest";
import { batchEnd } from "../../src/memory/import.js";

describe("import batches", () => {
  it("cuts a batch by UTF-8 bytes, not UTF-16 code units", () => {
    // 100 CJK characters: 100 code units, 300 bytes each event.
    const events = Array.from({ length: 4 }, () => ({ content: "队".repeat(100) }));
    // Two events are 600 bytes, past 500: the batch is cut there (counting code units, 200 < 500, it would go on).
    expect(batchEnd(events, 0, 10, 500)).toBe(2);
    expect(batchEnd(events, 2, 10, 500)).toBe(4);
  });

  it("counts byte payloads by their length and keeps at least one event, however large", () => {
    const events = [{ content: new Uint8Array(1000) }, { content: "x" }, { content: "y" }];
    expect(batchEnd(events, 0, 10, 10)).toBe(1);
    expect(batchEnd(events, 1, 10, 10)).toBe(3);
  });

  it("stops at the batch size", () => {
    const events = Array.from({ length: 5 }, () => ({ content: "a" }));
    expect(batchEnd(events, 0, 2, 1_000_000)).toBe(2);
    expect(batchEnd(events, 4, 2, 1_000_000)).toBe(5);
  });
});
