import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopLocalServers } from "../../plugin/transport/local-server/client.js";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { CLOSED_REGISTRY } from "../../scripts/opencode-harness.js";
import { ROOT } from "../helpers.js";

/**
 * Issue 40 (then the README's quick start; since issue 44 the README leads with the install by name, proven by
 * tests/e2e/npm-install.test.ts): the clone-and-path install of docs/development.md, run as written, by a person whose
 * OpenCode already has a model provider (here the project's scripted model stands in for it). Fresh HOME, nothing
 * started by hand: the commands of its quick-start block (`<repository URL>` is this checkout, cloned from its HEAD),
 * then two `opencode run`s as the page shows them; the second run's request must carry the first run's words in its
 * shared memory.
 */

const run = promisify(execFile);
const PAGE = readFileSync(join(ROOT, "docs", "development.md"), "utf8");
let root = "";
let home = "";
let model: ModelServer;
let env: NodeJS.ProcessEnv = {};

/** The commands between the quick-start markers, comments dropped. */
function quickStartCommands(readme: string): string[] {
  const block = /<!-- quick-start[^>]*-->\s*```sh\n([\s\S]*?)```\s*<!-- \/quick-start -->/.exec(readme)?.[1];
  if (!block) throw new Error("docs/development.md has no quick-start block between <!-- quick-start --> markers");
  return block
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter(Boolean);
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "optchat-quickstart-"));
  // As root the embedded server runs as user postgres, which must be able to enter the data directory's parents.
  chmodSync(root, 0o755);
  home = join(root, "home");
  model = await startModelServer();
  mkdirSync(join(home, ".config", "opencode"), { recursive: true });
  mkdirSync(join(root, "tmp"));
  // The person's OpenCode, already set up with a provider (nothing of optchat in it yet).
  writeFileSync(
    join(home, ".config", "opencode", "opencode.json"),
    JSON.stringify({
      autoupdate: false,
      share: "disabled",
      model: "fake/fake",
      small_model: "fake/fake",
      enabled_providers: ["fake"],
      provider: {
        fake: {
          npm: "@ai-sdk/openai-compatible",
          name: "Fake",
          options: { baseURL: model.url, apiKey: "x" },
          models: { fake: { name: "fake", limit: { context: 100_000, output: 4_000 } } },
        },
      },
    }),
  );
  // A person's shell: none of the test runner's variables (npm's own, vitest's, NODE_ENV), no optchat setting.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) =>
        !/^(OPTCHAT_|OPENCODE|npm_|VITEST|XDG_)/i.test(name) && name !== "DATABASE_URL" && name !== "NODE_ENV",
    ),
  );
  env = {
    ...inherited,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    XDG_CACHE_HOME: join(home, ".cache"),
    TMPDIR: join(root, "tmp"),
    // The embedded server's data in this HOME (as root its default is /var/lib/optchat, which is the machine's).
    OPTCHAT_DATA_DIR: join(home, ".local", "share", "optchat"),
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
  };
}, 60_000);

afterAll(async () => {
  await stopLocalServers(join(root, "tmp", `optchat-${process.getuid?.() ?? "user"}`)).catch(() => []);
  await run(process.execPath, [join(home, "optchat", "bin", "optchat.mjs"), "db", "stop"], { env }).catch(() => {});
  await model?.close();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("the clone-and-path install of docs/development.md", () => {
  it(
    "has at most 5 commands, and a person's second `opencode run` reads the first one's words",
    { timeout: 600_000 },
    async () => {
      const commands = quickStartCommands(PAGE);
      expect(commands.length).toBeLessThanOrEqual(3);
      const script = commands.map((line) => line.replaceAll("<repository URL>", ROOT)).join("\n");
      // npm reads the packages it already has first (the machine running the test installed this checkout).
      await run("bash", ["-euo", "pipefail", "-c", script], {
        env: { ...env, npm_config_prefer_offline: "true" },
        cwd: home,
        maxBuffer: 64 << 20,
      });

      const runLine = /^(~\/optchat\/node_modules\/\.bin\/opencode run) "your prompt"/m.exec(PAGE)?.[1];
      expect(runLine, "docs/development.md shows `opencode run` from this checkout").toBeDefined();
      const project = join(home, "project");
      mkdirSync(project);
      await run("git", ["init", "-q"], { cwd: project });
      // Nothing may be fetched at OpenCode's start: opencode-setup linked what it needs.
      // The one setting: the admission wait raised from its 10 s, as a loaded CI machine has taken longer than that.
      const opencodeEnv = {
        ...env,
        npm_config_registry: CLOSED_REGISTRY,
        PWD: project,
        OPTCHAT_ADMISSION_WAIT_MS: "60000",
      };
      const ask = (prompt: string) =>
        // stdin from /dev/null: a person's terminal, not the runner's open pipe, which `opencode run` would read to its end.
        run("bash", ["-c", `${runLine} "$PROMPT" < /dev/null`], {
          env: { ...opencodeEnv, PROMPT: prompt },
          cwd: project,
          timeout: 240_000,
        }).catch((error: { stderr?: string; stdout?: string; message: string }) => {
          throw new Error(`${error.message}\nstdout: ${error.stdout}\nstderr: ${error.stderr}`);
        });
      await ask("We decided: the release branch is named trunk-7. REPLY=Noted: trunk-7.");
      // At once, as a script would: the local server publishes the first run's turn after that run ends, and the second
      // run's prompt waits for it (OPTCHAT_ADMISSION_WAIT_MS, below).
      await ask("Which release branch did we decide on?");

      const mains = model.requests().filter((request) => request.kind === "main");
      expect(mains).toHaveLength(2);
      const second = JSON.stringify(mains[1]?.body);
      expect(second).toMatch(/<shared_memory[^>]*>[\s\S]*trunk-7/);
    },
  );
});
