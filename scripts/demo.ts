// `npm run demo`: two sessions share memory through the memory service, against a real PostgreSQL and the real
// compactor (with the deterministic summarizer). The OpenCode version of this demo, with two real OpenCode processes,
// comes with the plugin; this one shows the same mechanics without OpenCode.
import pg from "pg";
import { isOptchatError } from "../src/core/errors.js";
import { resolveConfig } from "../src/memory/config.js";
import { migrateAll } from "../src/memory/migrate.js";
import { openMemory } from "../src/memory/service.js";
import { startWorker } from "../src/memory/worker.js";

const say = (line = "") => process.stdout.write(`${line}\n`);
const base = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const databaseName = `optchat_demo_${process.pid}`;
const adminUrl = new URL(base);
adminUrl.pathname = "/postgres";
const demoUrl = new URL(base);
demoUrl.pathname = `/${databaseName}`;

async function admin(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl.toString(), connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

async function main(): Promise<void> {
  try {
    await admin("SELECT 1");
  } catch (error) {
    process.stderr.write(
      `No PostgreSQL at ${adminUrl.host}: ${(error as Error).message}\nStart one (docker compose up -d db, then DATABASE_URL=postgres://postgres:optchat@127.0.0.1:5432/optchat) or set DATABASE_URL to a server where you may create databases.\n`,
    );
    process.exitCode = 1;
    return;
  }
  say(
    `optchat demo: a scratch database ${databaseName} on ${adminUrl.host}, the compactor with the deterministic summarizer.`,
  );
  await migrateAll(demoUrl.toString());
  const config = resolveConfig({ overrides: { databaseUrl: demoUrl.toString() } });
  const memory = await openMemory(config);
  const worker = await startWorker(memory, config, () => {});
  try {
    const a = await memory.openSession({ host: "demo", hostSessionId: "A", projectId: "prj_demo", title: "session A" });
    const b = await memory.openSession({ host: "demo", hostSessionId: "B", projectId: "prj_demo", title: "session B" });
    const decision =
      "We need a persistent queue for the importer. Let's not use Redis: the existing broker already persists messages.";
    say();
    say(`1. Session A (${a.sessionId}) decides something:`);
    say(`   user: ${decision}`);
    await memory.admitTurn({ sessionId: a.sessionId, turnId: "a1", query: decision });
    await memory.ingestMany([
      {
        sessionId: a.sessionId,
        turnId: "a1",
        kind: "user",
        finalization: { hostSessionId: "A", messageId: "1" },
        occurredAt: new Date().toISOString(),
        content: decision,
      },
      {
        sessionId: a.sessionId,
        turnId: "a1",
        kind: "assistant",
        finalization: { hostSessionId: "A", messageId: "2" },
        occurredAt: new Date().toISOString(),
        content: "Agreed: the importer will use the broker's durable queue. No Redis.",
      },
    ]);
    await memory.finishTurn({ sessionId: a.sessionId, turnId: "a1" }, "completed");
    const deadline = Date.now() + 30_000;
    while ((await memory.readScope("project:prj_demo")).snapshot.publicationHighWater < 1) {
      if (Date.now() > deadline) throw new Error("the turn was not published within 30 s");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    say("   The compactor summarized the turn and published it to the project's shared memory.");

    say();
    say(`2. Session B (${b.sessionId}) starts a turn. Its memory blocks, assembled before any tool call:`);
    await memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", query: "add a persistent queue" });
    const context = await memory.assembleContext(
      { sessionId: b.sessionId, turnId: "b1" },
      { windowTokens: 128_000, instructionsTokens: 4000, activeTokens: 200, outputTokens: 8000, reserveTokens: 2000 },
    );
    for (const block of context.blocks) for (const line of block.text.split("\n")) say(`   | ${line}`);
    say(
      `   (${context.tokens.used} of ${context.tokens.available} memory tokens, snapshot ${context.snapshot.publicationHighWater})`,
    );

    say();
    say("3. B zooms from the shared line to A's original message:");
    const ctx = { sessionId: b.sessionId, turnId: "b1" };
    const publication = await memory.zoom(ctx, "pub:0+1");
    if (publication.kind !== "publication") throw new Error("pub:0+1 is not a publication");
    say(
      `   memory_zoom pub:0+1 -> turn ${publication.turnId} of ${publication.sessionId} (${publication.outcome}), cover ${publication.cover.map((c) => c.ref).join(", ")}`,
    );
    const cover = await memory.zoom(ctx, publication.cover[0]?.ref as string);
    const first = cover.kind === "lines" ? cover.lines[0]?.ref : publication.cover[0]?.ref;
    say(
      `   memory_zoom ${publication.cover[0]?.ref} -> ${cover.kind === "lines" ? cover.lines.map((l) => l.ref).join(", ") : cover.kind}`,
    );
    const original = await memory.zoom(ctx, first as string);
    if (original.kind !== "message") throw new Error("expected a message");
    say(`   memory_zoom ${first} -> ${original.recordKind}: ${original.text}`);
    if (original.text !== decision) throw new Error("the original message differs from what A said");
    say();
    say("Done: B saw A's decision without asking, and reached A's exact words in three zooms.");
  } finally {
    await worker.stop();
    await memory.close();
    await admin(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`).catch(() => {});
  }
}

main().catch((error) => {
  process.stderr.write(`demo failed: ${isOptchatError(error) ? `${error.code}: ` : ""}${(error as Error).message}\n`);
  process.exitCode = 1;
});
