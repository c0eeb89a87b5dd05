// `npm run demo -- --v2`: the demo's story on OpenCode V2 (@opencode/cli 2.1.2, installed apart by `npm run setup:v2`),
// with the V2 host (plugin/v2): two `opencode run --standalone` processes of one project, the scripted model, the same
// memory target as `npm run demo`. A decides; B's first request already holds the decision; B zooms to A's words.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { admin, type DemoTarget, ROOT, say, showFirstRequest, text, until, WAIT_MS } from "./demo-common.js";
import { startModelServer } from "./model-server.js";
import {
  cleanupOpencode2Env,
  createOpencode2Env,
  OPTCHAT_V2_PLUGIN_DIR,
  type Opencode2Env,
  processesOf,
  runOpencode2,
} from "./opencode2-harness.js";

const DECISION =
  "We need a persistent queue for the importer. Decision: no Redis; use Postgres LISTEN/NOTIFY with a jobs table, because we already run Postgres.";

export async function demoV2(target: DemoTarget): Promise<void> {
  await target.prepare();
  const evidence = join(ROOT, ".demo", `v2-${new Date().toISOString().replace(/[:.]/g, "-")}`);
  mkdirSync(evidence, { recursive: true });
  const requestsFile = join(evidence, "requests.jsonl");
  say(`optchat demo on OpenCode V2 (@opencode/cli 2.1.2): ${target.where}, a scripted local model.`);
  const model = await startModelServer({ logFile: requestsFile });
  const extraEnv = {
    OPTCHAT_SUMMARIZER: "openai-compatible",
    OPTCHAT_SUMMARIZER_URL: model.url,
    OPTCHAT_SUMMARIZER_MODEL: "optchat-compactor",
    OPTCHAT_READINESS_WAIT_MS: "60000",
    ...(target.pluginOptions.databaseUrl ? { DATABASE_URL: target.pluginOptions.databaseUrl } : { DATABASE_URL: "" }),
    ...target.env,
  };
  const envs: Opencode2Env[] = [];
  const mainRequests = () => model.requests().filter((request) => request.kind === "main");
  try {
    const envA = await createOpencode2Env({ modelUrl: model.url, plugins: [OPTCHAT_V2_PLUGIN_DIR], extraEnv });
    envs.push(envA);
    const envB = await createOpencode2Env({
      modelUrl: model.url,
      plugins: [OPTCHAT_V2_PLUGIN_DIR],
      extraEnv,
      shareDataWith: envA,
    });
    envs.push(envB);
    say('Two terminals on one project, each running `opencode run --standalone` with plugin/v2 under "plugins".');
    say("(REPLY=… and TOOLS=… in a prompt tell the scripted model what to answer; a real model decides by itself.)");

    say();
    say("1. Session A decides something:");
    const a = await runOpencode2(envA, `${DECISION}\nREPLY=Agreed: a jobs table with LISTEN/NOTIFY, no Redis.`, {
      timeoutMs: WAIT_MS,
    });
    if (a.code !== 0) throw new Error(`A's run failed (exit ${a.code}): ${a.stderr.slice(-2000)}`);
    say(`   user: ${DECISION}`);
    say(`   assistant: ${a.text.trim()}`);
    await until("A's turn to be stored", async () => {
      const rows = await admin<{ state: string }>(
        `SELECT t.state FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id
          WHERE s.host = 'opencode-v2' AND s.host_session_id = '${a.sessionId}'`,
        target.demoUrl,
      );
      return rows[0]?.state === "completed" ? true : undefined;
    });

    say();
    say("2. Session B starts, in the other terminal, and asks a related question.");
    model.clear();
    const question = "Q: how should failed imports be retried?";
    const b = await runOpencode2(envB, `${question}\nREPLY=I will reuse the queue design from shared memory.`, {
      timeoutMs: WAIT_MS,
    });
    if (b.code !== 0 || !b.sessionId) throw new Error(`B's run failed (exit ${b.code}): ${b.stderr.slice(-2000)}`);
    const first = mainRequests()[0];
    if (!first) throw new Error("B's request never reached the model");
    const shared = showFirstRequest(first, "\n");

    say();
    say("3. B zooms from the shared line to A's original message, one memory_zoom per step:");
    let ref = /^\s*(pub:\d+\+\d+)\|/m.exec(shared)?.[1];
    for (let step = 1; step <= 8 && ref; step++) {
      model.clear();
      const call = [{ name: "memory_zoom", args: { ref } }];
      const zoom = await runOpencode2(envB, `ZOOM-${step} TOOLS=${JSON.stringify(call)} END`, {
        session: b.sessionId,
        timeoutMs: WAIT_MS,
      });
      if (zoom.code !== 0) throw new Error(`the zoom run failed (exit ${zoom.code}): ${zoom.stderr.slice(-2000)}`);
      const after = mainRequests().at(-1)?.body as { messages?: { role: string; content?: unknown }[] } | undefined;
      const result = text(resultContent(after?.messages?.at(-1)?.content));
      const lines = result.split("\n");
      say(`   memory_zoom ${ref} -> ${lines[0]}`);
      if (result.includes("<original_message")) {
        for (const line of lines.slice(1, -2)) say(`   | ${line}`);
        if (!result.includes(DECISION)) throw new Error("the original message differs from what A said");
        say();
        say(`Done: B saw A's decision without asking, and reached A's exact words in ${step} zooms.`);
        say(`Every request the model received: ${requestsFile}`);
        return;
      }
      for (const line of lines.slice(1, -1)) say(`   | ${line}`);
      ref = lines
        .slice(1)
        .find((line) => /^[^|\s]+\|/.test(line))
        ?.split("|")[0];
    }
    throw new Error("did not reach the original message in 8 zooms");
  } finally {
    for (const env of envs.reverse()) {
      await cleanupOpencode2Env(env).catch(() => {});
      const left = processesOf(env);
      if (left.length > 0) say(`(processes left in ${env.root}: ${left.join(", ")})`);
    }
    await model.close();
    await target.cleanup();
  }
}

/** A tool message's content on the OpenAI wire: a string, or parts with `text`. */
function resultContent(content: unknown): unknown {
  return Array.isArray(content) ? content.map((part) => ({ text: (part as { text?: string }).text ?? "" })) : content;
}
