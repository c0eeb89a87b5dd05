import { afterAll, beforeAll } from "vitest";
import { type Config, resolveConfig, type SettingName } from "../../src/memory/config.js";
import type { IngestResult } from "../../src/memory/ingest.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import type { Session } from "../../src/store/sessions.js";
import { createTestDatabase } from "./database.js";

export interface TestMemory {
  memory: Memory;
  config: Config;
  url: string;
}

/** Registers beforeAll/afterAll hooks giving the file its own database and an open memory service. */
export function useTestMemory(overrides: Partial<Record<SettingName, string | number>> = {}): TestMemory {
  const handle = {} as TestMemory;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const db = await createTestDatabase();
    drop = db.drop;
    handle.url = db.url;
    // The deterministic summarizer unless a test names another: the default (auto) would look for a real model.
    handle.config = resolveConfig({
      overrides: { poolSize: 12, summarizer: "fake", ...overrides, databaseUrl: db.url },
    });
    handle.memory = await openMemory(handle.config);
  });
  afterAll(async () => {
    await handle.memory?.close();
    await drop?.();
  });
  return handle;
}

/** An ingest event as tests write it: the finalization key flattened to `host`, `messageId` and an optional `partId`. */
export type TestEvent = Omit<IngestEvent, "finalization"> & {
  readonly host: string;
  readonly messageId: string;
  readonly partId?: string;
};

/** The ingest event of a test message (the one fixture builder for ingest events). */
export function ingestEvent({ host, messageId, partId, ...event }: TestEvent): IngestEvent {
  return { ...event, finalization: { hostSessionId: host, messageId, ...(partId !== undefined ? { partId } : {}) } };
}

/**
 * Ingests a test file's messages numbered across all its sessions: the n-th is message `m<n>` of its session's host
 * session and occurred n seconds after `start` (epoch ms), so their ids are unique and their times in order.
 */
export function messageWriter(
  db: { readonly memory: Memory },
  start: number,
): (
  session: Pick<Session, "sessionId" | "hostSessionId">,
  turnId: string,
  kind: IngestEvent["kind"],
  content: string,
  extra?: Partial<TestEvent>,
) => Promise<IngestResult> {
  let n = 0;
  return async (session, turnId, kind, content, extra = {}) => {
    n += 1;
    return await db.memory.ingest(
      ingestEvent({
        sessionId: session.sessionId,
        turnId,
        kind,
        host: session.hostSessionId,
        messageId: `m${n}`,
        occurredAt: new Date(start + n * 1000).toISOString(),
        content,
        ...extra,
      }),
    );
  };
}

/**
 * One publishing turn per call: admitted with its first text as the query, its texts written as alternating user and
 * assistant messages (through `messageWriter`), then finished as completed.
 */
export function turnWriter(
  db: { readonly memory: Memory },
  start: number,
): (session: Pick<Session, "sessionId" | "hostSessionId">, turnId: string, texts: readonly string[]) => Promise<void> {
  const writeMessage = messageWriter(db, start);
  return async (session, turnId, texts) => {
    await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: texts[0], publishes: true });
    for (const [k, text] of texts.entries()) await writeMessage(session, turnId, k === 0 ? "user" : "assistant", text);
    await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  };
}

/** A new session holding one message of turn t1 (not admitted), at 2026-11-20T10:00:00Z. */
export async function sessionWithOneMessage(
  memory: Memory,
  input: {
    hostSessionId: string;
    projectId: string;
    kind: "user" | "assistant";
    content: string;
    host?: string;
    messageId?: string;
  },
): Promise<Session> {
  const { hostSessionId, projectId, kind, content, host = "test", messageId = "m0" } = input;
  const session = await memory.openSession({ host, hostSessionId, projectId });
  await memory.ingest(
    ingestEvent({
      sessionId: session.sessionId,
      turnId: "t1",
      kind,
      host: hostSessionId,
      messageId,
      occurredAt: "2026-11-20T10:00:00Z",
      content,
    }),
  );
  return session;
}

/** A large model window for assembling context in service-level tests (every block fits). */
export const LARGE_WINDOW = {
  windowTokens: 200_000,
  instructionsTokens: 2000,
  activeTokens: 500,
  outputTokens: 8000,
  reserveTokens: 1000,
} as const;

/** A 100,000-token model window with the instructions, active turn and output of a small session's request. */
export const MEDIUM_WINDOW = {
  windowTokens: 100_000,
  instructionsTokens: 3000,
  activeTokens: 1000,
  outputTokens: 4000,
  reserveTokens: 1000,
} as const;

/**
 * A session with one finished turn of three 240-byte messages on `theme`: each message is a free session node, but the
 * publication leaf over their cover needs the summarizer (the fixture of the publication failure and crash tests).
 */
export async function finishTurnNeedingSummary(
  memory: Memory,
  input: { hostSessionId: string; projectId: string; theme: string; day: number },
): Promise<{ sessionId: string; turnId: string }> {
  const session = await memory.openSession({
    host: "test",
    hostSessionId: input.hostSessionId,
    projectId: input.projectId,
  });
  const ctx = { sessionId: session.sessionId, turnId: "t1" };
  await memory.admitTurn(ctx);
  for (let k = 0; k < 3; k++) {
    await memory.ingest({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: k === 0 ? "user" : "assistant",
      finalization: { hostSessionId: input.hostSessionId, messageId: `m${k}` },
      occurredAt: new Date(Date.UTC(2026, 10, input.day, 7, k)).toISOString(),
      content: `message ${k}: ${`${input.theme} `.repeat(4)}`.slice(0, 240),
    });
  }
  await memory.finishTurn(ctx, "completed");
  return ctx;
}
