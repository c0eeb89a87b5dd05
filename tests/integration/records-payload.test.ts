import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { PayloadPage, RecordRef } from "../../src/memory/service.js";
import { ingestEvent, useTestMemory } from "../helpers.js";

const db = useTestMemory();
let sessionId = "";
let message = 0;

beforeAll(async () => {
  sessionId = (await db.memory.openSession({ host: "test", hostSessionId: "payloads", projectId: "prj_payloads" }))
    .sessionId;
});

async function ingestContent(content: string | Uint8Array, extra: Partial<IngestEvent> = {}): Promise<RecordRef> {
  message += 1;
  const result = await db.memory.ingest(
    ingestEvent({
      sessionId,
      turnId: "t1",
      kind: "tool_result",
      toolCallId: `call_${message}`,
      toolName: "bash",
      host: "payloads",
      messageId: `m${message}`,
      partId: "p",
      occurredAt: "2026-11-20T10:00:00Z",
      content,
      ...extra,
    }),
  );
  if (!("seq" in result)) throw new Error(`not sealed: ${result.status}`);
  return { sessionId, generation: result.generation, seq: result.seq };
}

async function readAll(ref: RecordRef, maxBytes: number): Promise<PayloadPage[]> {
  const pages: PayloadPage[] = [];
  let cursor: string | undefined;
  do {
    const page = await db.memory.readPayload(ref, { maxBytes, ...(cursor ? { cursor } : {}) });
    pages.push(page);
    cursor = page.nextCursor ?? undefined;
    if (pages.length > 10_000) throw new Error("pagination does not end");
  } while (cursor);
  return pages;
}

/** 10 MiB of tool output: text, NUL bytes and every common kind of invalid UTF-8, deterministically placed. */
function dirtyOutput(size: number): Buffer {
  const out = Buffer.alloc(size);
  const pieces = [
    Buffer.from("line of build output: compiling module ✓ 部署 ok\n"),
    Buffer.from([0x00, 0x00]), // NUL bytes
    Buffer.from([0xff, 0xfe]), // bytes that never occur in UTF-8
    Buffer.from([0x80]), // a lone continuation byte
    Buffer.from([0xc0, 0xaf]), // an overlong encoding of '/'
    Buffer.from([0xed, 0xa0, 0x80]), // an encoded surrogate
    Buffer.from([0xe2, 0x82]), // a truncated 3-byte sequence
  ];
  let offset = 0;
  let i = 0;
  while (offset < size) {
    const piece = pieces[i++ % pieces.length] as Buffer;
    offset += piece.copy(out, offset);
  }
  return out;
}

describe("payloads: stored whole, read back in pages", () => {
  it("round-trips a 10 MB tool output containing invalid UTF-8 and NUL bytes byte for byte", async () => {
    const original = dirtyOutput(10 * 1024 * 1024);
    const ref = await ingestContent(original, { hostTruncated: undefined });
    const pages = await readAll(ref, 1024 * 1024);

    expect(pages.length).toBe(10);
    const joined = Buffer.concat(pages.map((p) => p.bytes));
    expect(joined.length).toBe(original.length);
    expect(createHash("sha256").update(joined).digest("hex")).toBe(createHash("sha256").update(original).digest("hex"));
    expect(pages.map((p) => p.complete)).toEqual([...Array(9).fill(false), true]);
    expect(pages.every((p) => p.validUtf8 === false && p.totalBytes === original.length)).toBe(true);
    // Text renderings replace invalid sequences, never drop bytes silently: the flag says so.
    expect(pages[0]?.text).toContain("\uFFFD");
    expect(pages[0]?.text).toContain("\u0000");

    // Cursors are stable: the same cursor gives the same page again.
    const second = pages[0]?.nextCursor as string;
    const again = await db.memory.readPayload(ref, { cursor: second, maxBytes: 1024 * 1024 });
    expect(again.bytes.equals(pages[1]?.bytes as Buffer)).toBe(true);
    expect(again.nextCursor).toBe(pages[1]?.nextCursor);

    // A record's metadata says how big it is, without reading it.
    const [listed] = await db.memory.listRecords(sessionId, { fromSeq: ref.seq, limit: 1 });
    expect(listed).toMatchObject({ payloadBytes: original.length, validUtf8: false, toolCallId: "call_1" });
  });

  it("never splits a UTF-8 code point across pages of a valid text payload", async () => {
    const text = "ascii, ünïcödé, 中文字符, 🙂🙃 emoji; ".repeat(20_000);
    const ref = await ingestContent(text);
    const pages = await readAll(ref, 4093); // an odd size, so page ends fall inside multi-byte characters
    expect(pages.map((p) => p.text).join("")).toBe(text);
    for (const page of pages) {
      expect(page.text).not.toContain("\uFFFD");
      expect(Buffer.from(page.text, "utf8").equals(page.bytes)).toBe(true);
      expect(page.bytes.length).toBeLessThanOrEqual(4093);
    }
  });

  it("rejects a cursor of another payload or a forged one", async () => {
    const a = await ingestContent("a".repeat(1000));
    const b = await ingestContent("b".repeat(1000));
    const pageA = await db.memory.readPayload(a, { maxBytes: 100 });
    await expect(db.memory.readPayload(b, { cursor: pageA.nextCursor as string })).rejects.toMatchObject({
      code: "INPUT_INVALID",
      issues: [{ field: "cursor" }],
    });
    await expect(db.memory.readPayload(a, { cursor: "p1.0000000000000000.zz" })).rejects.toMatchObject({
      code: "INPUT_INVALID",
    });
    await expect(db.memory.readPayload({ sessionId, generation: 0, seq: 999_999 })).rejects.toMatchObject({
      code: "REF_NOT_FOUND",
    });
  });

  it("says when the host had already truncated an output", async () => {
    const ref = await ingestContent("head of the output ... tail of the output", {
      hostTruncated: { originalBytes: 48_213 },
    });
    const page = await db.memory.readPayload(ref);
    expect(page).toMatchObject({ hostTruncated: true, hostOriginalBytes: 48_213, complete: true });
  });

  it("stores a JS string with lone surrogates as U+FFFD and records how many were replaced", async () => {
    const ref = await ingestContent("broken \uD800 pair and \uDC00 again");
    const page = await db.memory.readPayload(ref);
    expect(page.text).toBe("broken \uFFFD pair and \uFFFD again");
    expect(page.validUtf8).toBe(true);
    const [record] = await db.memory.listRecords(sessionId, { fromSeq: ref.seq, limit: 1 });
    expect(record?.attributes).toEqual({ loneSurrogatesReplaced: 2 });
  });

  it("deduplicates identical payloads by hash", async () => {
    const before = (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.blobs")).rows[0].n;
    await ingestContent("the same output twice");
    await ingestContent("the same output twice");
    const after = (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.blobs")).rows[0].n;
    expect(after - before).toBe(1);
  });
});
