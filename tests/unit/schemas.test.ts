import { describe, expect, it } from "vitest";
import { InputInvalidError } from "../../src/core/errors.js";
import { ingestEventSchema, parseInput } from "../../src/memory/schemas.js";

const valid = {
  sessionId: "ses_1",
  turnId: "t1",
  kind: "tool_call",
  toolCallId: "call_1",
  finalization: { hostSessionId: "h", messageId: "m", partId: "p" },
  occurredAt: "2026-11-20T10:00:00+01:00",
  content: new Uint8Array([0, 255, 1]),
};

describe("ingest event schema", () => {
  it("accepts a tool call with bytes as content and fills defaults", () => {
    const parsed = parseInput(ingestEventSchema, valid, "test");
    expect(parsed.final).toBe(true);
    expect(parsed.finalization.revision).toBe(0);
    expect(parsed.content).toBeInstanceOf(Uint8Array);
  });

  it("names nested fields with a prefix and lists every problem at once", () => {
    try {
      parseInput(
        ingestEventSchema,
        { ...valid, finalization: { messageId: "" }, hostTruncated: { originalBytes: -1 } },
        "ingestMany",
        "events[2]",
      );
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InputInvalidError);
      const fields = (error as InputInvalidError).issues.map((i) => i.field).sort();
      expect(fields).toEqual([
        "events[2].finalization.hostSessionId",
        "events[2].finalization.messageId",
        "events[2].hostTruncated.originalBytes",
      ]);
      expect((error as Error).message).toMatch(/^ingestMany: invalid input \(/);
    }
  });

  it("refuses hidden reasoning whatever the host calls it", () => {
    for (const kind of ["reasoning", "thinking", "thought"]) {
      const result = ingestEventSchema.safeParse({ ...valid, kind });
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]?.message).toMatch(/reasoning is never stored/);
    }
  });
});
