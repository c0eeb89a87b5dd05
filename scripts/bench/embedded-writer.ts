/**
 * One writer of `bench embedded`'s kill loop: a session written through the public service API with no database URL
 * (the embedded server of OPTCHAT_DATA_DIR, started again by the retry helper when it was killed), one turn after
 * another until its deadline. Prints `{"committed":"<message id>"}` once an ingest call has returned (its records are
 * committed), and `{"failed":…}` for a call that failed (a client may lose what it never saw committed).
 *
 * Usage: node --import tsx scripts/bench/embedded-writer.ts <name> <seconds>
 */
import { resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";

const [name, secondsText] = process.argv.slice(2);
if (!name || !secondsText) {
  process.stderr.write("usage: embedded-writer.ts <name> <seconds>\n");
  process.exit(2);
}
const deadline = Date.now() + Number(secondsText) * 1000;
const say = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const memory = await openMemory(resolveConfig({ env: process.env, overrides: { poolSize: 2 } }));
try {
  const hostSessionId = `kill-loop-${name}`;
  const session = await memory.openSession({ host: "bench", hostSessionId, projectId: "prj_embedded_kill_loop" });
  for (let turn = 0; Date.now() < deadline; turn++) {
    const ctx = { sessionId: session.sessionId, turnId: `t${turn}` };
    try {
      await memory.admitTurn({ ...ctx, query: `turn ${turn} of ${name}` });
      for (let part = 0; part < 3; part++) {
        const messageId = `${name}_m${turn}_${part}`;
        await memory.ingestMany([
          {
            sessionId: session.sessionId,
            turnId: ctx.turnId,
            kind: part === 0 ? "user" : "assistant",
            finalization: { hostSessionId, messageId },
            occurredAt: new Date().toISOString(),
            content: `[${messageId}] ${"the writer keeps writing while the server is killed. ".repeat(8)}`,
          },
        ]);
        say({ committed: messageId });
        await sleep(20);
      }
      await memory.finishTurn(ctx, "completed");
    } catch (error) {
      say({ failed: `${name} turn ${turn}`, error: (error as Error).message.slice(0, 200) });
      await sleep(200);
    }
  }
} finally {
  await memory.close().catch(() => {});
}
