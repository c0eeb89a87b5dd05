/**
 * The V2 compatibility probe (issue 38): runs real `@opencode/cli` 2.1.2 processes with the probe plugin
 * (tests/fixtures/v2-probe) against the scripted model and prints, per scenario, which session hooks fired in what
 * order (with the request kind and session) and which bus events came. docs/opencode-v2-notes.md records the result.
 *
 *   node --import tsx scripts/opencode2-probe.ts [scenario ...]   (run, continue, fork, tools, subagent, compaction,
 *                                                                  compaction-answered, delete, service)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startModelServer } from "./model-server.js";
import {
  cleanupOpencode2Env,
  createOpencode2Env,
  execOpencode2,
  type Opencode2Env,
  processesOf,
  runOpencode2,
  startService,
} from "./opencode2-harness.js";

const PROBE_DIR = fileURLToPath(new URL("../tests/fixtures/v2-probe", import.meta.url));
const BIG = "x".repeat(3000);

interface Line {
  hook: string;
  pid: number;
  input?: Record<string, unknown>;
  event?: { type?: string; data?: Record<string, unknown> };
}

function readLog(file: string): Line[] {
  try {
    return readFileSync(file, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Line);
  } catch {
    return [];
  }
}

function summary(lines: readonly Line[], sessions: Map<string, string>): string[] {
  const name = (id: unknown) => {
    if (typeof id !== "string") return "";
    if (!sessions.has(id)) sessions.set(id, `S${sessions.size + 1}`);
    return sessions.get(id) as string;
  };
  const out: string[] = [];
  for (const line of lines) {
    if (line.hook === "event") {
      const type = line.event?.type ?? "?";
      if (/delta|usage|updated$|progress|input\.(started|ended)/.test(type) && !/session\.(renamed)/.test(type))
        continue;
      out.push(`event ${type} ${name(line.event?.data?.sessionID)}`);
      continue;
    }
    if (line.hook === "setup") {
      out.push(`setup pid=${line.pid}`);
      continue;
    }
    const input = line.input ?? {};
    const extra = input.kind ? ` kind=${input.kind}` : input.agent ? ` agent=${input.agent}` : "";
    const messages = Array.isArray(input.messages) ? ` messages=${input.messages.length}` : "";
    out.push(`${line.hook} ${name(input.sessionID)}${extra}${messages}`);
  }
  return out;
}

async function scenario(name: string, body: (env: Opencode2Env, log: string) => Promise<void>, contextLimit?: number) {
  const model = await startModelServer();
  const env = await createOpencode2Env({ modelUrl: model.url, plugins: [PROBE_DIR], contextLimit });
  const log = join(env.root, "probe.jsonl");
  env.env.OPTCHAT_V2_PROBE_LOG = log;
  try {
    await body(env, log);
  } catch (error) {
    console.log(`!! ${name}: ${String(error)}`);
  }
  const sessions = new Map<string, string>();
  console.log(`\n## ${name}`);
  for (const line of summary(readLog(log), sessions)) console.log(`  ${line}`);
  console.log(
    `  model requests: ${model
      .requests()
      .map((r) => `${r.kind}:${r.reply.slice(0, 40)}`)
      .join(" | ")}`,
  );
  await cleanupOpencode2Env(env);
  console.log(`  processes left: ${processesOf(env).length}`);
  await model.close();
}

const check = (result: { code: number | null; errors: string[] }) => {
  if (result.code !== 0) console.log(`  (exit ${result.code}: ${result.errors.join("; ")})`);
};

const scenarios: Record<string, () => Promise<void>> = {
  run: () => scenario("run", async (env) => check(await runOpencode2(env, "hello"))),
  continue: () =>
    scenario("continue (--session)", async (env) => {
      const first = await runOpencode2(env, "first");
      check(await runOpencode2(env, "second", { session: first.sessionId }));
    }),
  fork: () =>
    scenario("fork (--session --fork)", async (env) => {
      const first = await runOpencode2(env, "first");
      check(await runOpencode2(env, "in the fork", { session: first.sessionId, fork: true }));
    }),
  tools: () =>
    scenario("tool loop", async (env) => {
      const calls = [1, 2].map((n) => ({ name: "shell", args: { command: `echo step-${n}` } }));
      check(await runOpencode2(env, `go TOOLS=${JSON.stringify(calls)} END`));
    }),
  subagent: () =>
    scenario("subagent", async (env) => {
      const call = { name: "subagent", args: { agent: "general", description: "probe", prompt: "child work" } };
      check(await runOpencode2(env, `delegate TOOLS=${JSON.stringify([call])} END`));
    }),
  compaction: () =>
    scenario(
      "compaction (native, 16k window)",
      async (env) => {
        const calls = Array.from({ length: 8 }, (_, n) => ({ name: "shell", args: { command: `echo ${n}${BIG}` } }));
        check(await runOpencode2(env, `fill TOOLS=${JSON.stringify(calls)} END`, { timeoutMs: 180_000 }));
      },
      16_000,
    ),
  "compaction-answered": () =>
    scenario(
      "compaction answered by the plugin (result set)",
      async (env) => {
        env.env.OPTCHAT_V2_PROBE_COMPACT = "PLUGIN-SUMMARY: the work so far";
        const calls = Array.from({ length: 8 }, (_, n) => ({ name: "shell", args: { command: `echo ${n}${BIG}` } }));
        check(await runOpencode2(env, `fill TOOLS=${JSON.stringify(calls)} END`, { timeoutMs: 180_000 }));
      },
      16_000,
    ),
  delete: () =>
    scenario("delete (opencode session delete)", async (env) => {
      const first = await runOpencode2(env, "to be deleted");
      const result = await execOpencode2(env, ["session", "delete", first.sessionId ?? "?"]);
      console.log(`  delete exit ${result.code} ${result.stdout.trim()} ${result.stderr.trim().slice(0, 200)}`);
    }),
  service: () =>
    scenario("two clients on one background service", async (env) => {
      await startService(env);
      const [a, b] = await Promise.all([
        runOpencode2(env, "client A", { standalone: false }),
        runOpencode2(env, "client B", { standalone: false }),
      ]);
      check(a);
      check(b);
    }),
};

const wanted = process.argv.slice(2);
for (const name of wanted.length > 0 ? wanted : Object.keys(scenarios)) {
  const run = scenarios[name];
  if (!run) throw new Error(`unknown scenario ${name}: one of ${Object.keys(scenarios).join(", ")}`);
  await run();
}
