/**
 * One writer process of `bench publication`: a session of the bench scope driven through the public service API the
 * way the plugin drives it (admit, the turn's messages one at a time, finish), one turn after another with a think
 * time in between, until its deadline. Prints one JSON line with what it did.
 *
 * Usage: node --import tsx scripts/bench/publication-writer.ts <databaseUrl> <index> <seconds> <thinkMs>
 */
import { resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";
import { seededRandom } from "./common.js";

const [databaseUrl, indexText, secondsText, thinkText] = process.argv.slice(2);
if (!databaseUrl || !indexText || !secondsText || !thinkText) {
  process.stderr.write("usage: publication-writer.ts <databaseUrl> <index> <seconds> <thinkMs>\n");
  process.exit(2);
}
const index = Number(indexText);
const deadline = Date.now() + Number(secondsText) * 1000;
const thinkMs = Number(thinkText);
const random = seededRandom(1000 + index);

const FILLER =
  "The assistant read the failing test, traced the null dereference to the session cache being cleared " +
  "before the compactor finished, and proposed holding the generation lock until the summary is sealed. " +
  "It then ran the suite again: 412 passed, 0 failed, 3 skipped, in 38.2 seconds on the CI runner. ";

/** A message of about `bytes` bytes whose words differ per writer and turn (so summaries and blobs differ). */
function text(turn: number, part: number, bytes: number): string {
  const head = `[writer ${index} turn ${turn} part ${part}] `;
  return (head + FILLER.repeat(Math.ceil(bytes / FILLER.length))).slice(0, bytes);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const memory = await openMemory(resolveConfig({ overrides: { databaseUrl, poolSize: 2 } }));
let turns = 0;
let records = 0;
try {
  const hostSessionId = `bench-writer-${index}`;
  const session = await memory.openSession({ host: "bench", hostSessionId, projectId: "prj_publication_bench" });
  // The shapes of a coding turn: a short prompt (a free leaf), an assistant step with a tool call whose output needs
  // the summarizer, and a final answer that needs it too.
  const parts: readonly { kind: "user" | "assistant" | "tool_result"; bytes: number }[] = [
    { kind: "user", bytes: 200 },
    { kind: "assistant", bytes: 300 },
    { kind: "tool_result", bytes: 1500 },
    { kind: "assistant", bytes: 900 },
  ];
  for (let turn = 0; Date.now() < deadline; turn++) {
    const ctx = { sessionId: session.sessionId, turnId: `t${turn}` };
    await memory.admitTurn({ ...ctx, query: text(turn, 0, 80) });
    for (const [part, shape] of parts.entries()) {
      // One message per call with free nodes built at once, as the OpenCode plugin ingests (plugin/host/adapter.ts).
      await memory.ingestMany(
        [
          {
            sessionId: session.sessionId,
            turnId: ctx.turnId,
            kind: shape.kind,
            ...(shape.kind === "tool_result" ? { toolName: "bash", toolCallId: `call${turn}` } : {}),
            finalization: { hostSessionId, messageId: `m${turn}_${part}` },
            occurredAt: new Date().toISOString(),
            content: text(turn, part, shape.bytes),
          },
        ],
        { buildFreeInline: true },
      );
      records += 1;
      await sleep(20 + random() * 40);
    }
    await memory.finishTurn(ctx, "completed");
    turns += 1;
    await sleep(thinkMs * (0.5 + random()));
  }
  process.stdout.write(`${JSON.stringify({ writer: index, sessionId: session.sessionId, turns, records })}\n`);
} finally {
  await memory.close();
}
