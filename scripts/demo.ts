// `npm run demo`: two real OpenCode 1.18.33 processes share memory through the optchat plugin, against a reachable
// PostgreSQL and the project's scripted OpenAI-compatible model (which also answers the compactor's calls). Session A
// decides something; session B's first request to the model already contains the decision (no tool call), and B zooms
// from the shared line down to A's exact words. Every request the model received is kept as evidence.
// `npm run demo -- --v2` runs the same story on OpenCode V2 (@opencode/cli 2.1.2): scripts/demo-v2.ts.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { isOptchatError } from "../src/core/errors.js";
import { admin, demoTarget, lastUser, ROOT, say, showFirstRequest, text, until, WAIT_MS } from "./demo-common.js";
import { startModelServer } from "./model-server.js";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "./opencode-harness.js";

const target = demoTarget();

async function main(): Promise<void> {
  const started = performance.now();
  await target.prepare();
  const readyMs = Math.round(performance.now() - started);
  const evidence = join(ROOT, ".demo", new Date().toISOString().replace(/[:.]/g, "-"));
  mkdirSync(evidence, { recursive: true });
  const requestsFile = join(evidence, "requests.jsonl");
  say(`optchat demo: ${target.where} (ready in ${readyMs} ms), OpenCode 1.18.33, a scripted local model.`);
  const model = await startModelServer({ logFile: requestsFile });
  const pluginOptions = target.pluginOptions;
  // The compactor of each OpenCode process calls the scripted model too (OpenAI-compatible, deterministic answers).
  const extraEnv = {
    OPTCHAT_SUMMARIZER: "openai-compatible",
    OPTCHAT_SUMMARIZER_URL: model.url,
    OPTCHAT_SUMMARIZER_MODEL: "optchat-compactor",
    OPTCHAT_READINESS_WAIT_MS: "60000",
    ...target.env,
  };
  const plugin = join(ROOT, "plugin", "index.ts");
  const envs: OpencodeEnv[] = [];
  const servers: OpencodeServer[] = [];
  try {
    const envA = await createOpencodeEnv({ modelUrl: model.url, pluginPath: plugin, pluginOptions, extraEnv });
    envs.push(envA);
    const envB = await createOpencodeEnv({
      modelUrl: model.url,
      pluginPath: plugin,
      pluginOptions,
      extraEnv,
      shareDataWith: envA,
    });
    envs.push(envB);
    const a = await startOpencodeServer(envA);
    servers.push(a);
    const b = await startOpencodeServer(envB);
    servers.push(b);
    say(`Two OpenCode servers on one project (pids ${a.pid} and ${b.pid}), each with the plugin and its compactor.`);
    say("(REPLY=… and TOOLS=… in a prompt tell the scripted model what to answer; a real model decides by itself.)");

    const decision =
      "We need a persistent queue for the importer. Decision: no Redis; use Postgres LISTEN/NOTIFY with a jobs table, because we already run Postgres.";
    say();
    say("1. Session A decides something:");
    const sessionA = await a.createSession("A: importer queue");
    await a.prompt(sessionA, `${decision} REPLY=Agreed: a jobs table with LISTEN/NOTIFY, no Redis.`);
    await a.waitIdle(sessionA, WAIT_MS);
    say(`   user: ${decision}`);
    say("   assistant: Agreed: a jobs table with LISTEN/NOTIFY, no Redis.");
    const published = await until("A's turn to be published", async () => {
      const rows = await admin<{ seq: number }>(
        "SELECT publication_seq::int AS seq FROM optchat.publications ORDER BY 1 LIMIT 1",
        target.demoUrl,
      );
      return rows[0];
    });
    say(
      `   The compactor summarized the turn and published it as pub:${published.seq}+1 in the project's shared memory.`,
    );

    say();
    say("2. Session B starts, in the other OpenCode process, and asks a related question.");
    const sessionB = await b.createSession("B: retries");
    const question = "Q: how should failed imports be retried?";
    await b.prompt(sessionB, `${question} REPLY=I will reuse the queue design from shared memory.`);
    await b.waitIdle(sessionB, WAIT_MS);
    const first = model.requests().find((r) => r.kind === "main" && lastUser(r).includes(question));
    if (!first) throw new Error("B's request never reached the model");
    // The stable memory message, then the volatile part that leads B's message (docs/caching.md).
    showFirstRequest(first, "");

    say();
    say("3. B zooms from the shared line to A's original message, one memory_zoom per step:");
    let ref = `pub:${published.seq}+1`;
    for (let step = 1; step <= 8; step++) {
      const marker = `ZOOM-${step}`;
      await b.prompt(sessionB, `${marker} TOOLS=[{"name":"memory_zoom","args":{"ref":"${ref}"}}] END`);
      await b.waitIdle(sessionB, WAIT_MS);
      const after = model
        .requests()
        .filter((r) => r.kind === "main" && lastUser(r).includes(marker))
        .at(-1);
      const result =
        ((after?.body as { messages?: { role: string; content?: unknown }[] })?.messages ?? [])
          .filter((m) => m.role === "tool")
          .map((m) => text(m.content))
          .at(-1) ?? "";
      const lines = result.split("\n");
      say(`   memory_zoom ${ref} -> ${lines[0]}`);
      if (result.includes("<original_message")) {
        for (const line of lines.slice(1, -2)) say(`   | ${line}`);
        if (!result.includes(decision)) throw new Error("the original message differs from what A said");
        say();
        say(`Done: B saw A's decision without asking, and reached A's exact words in ${step} zooms.`);
        say(`Every request the model received: ${requestsFile}`);
        return;
      }
      const next = lines.slice(1).find((line) => /^[^|\s]+\|/.test(line));
      if (!next) throw new Error(`nothing to open in:\n${result}`);
      for (const line of lines.slice(1, -1)) say(`   | ${line}`);
      ref = next.split("|")[0] as string;
    }
    throw new Error("did not reach the original message in 8 zooms");
  } finally {
    for (const server of servers.reverse()) await server.stop().catch(() => {});
    for (const env of envs.reverse()) await cleanupOpencodeEnv(env).catch(() => {});
    await model.close();
    await target.cleanup();
  }
}

const run = process.argv.includes("--v2") ? import("./demo-v2.js").then((v2) => v2.demoV2(target)) : main();
run.catch((error) => {
  process.stderr.write(`demo failed: ${isOptchatError(error) ? `${error.code}: ` : ""}${(error as Error).message}\n`);
  process.exitCode = 1;
});
