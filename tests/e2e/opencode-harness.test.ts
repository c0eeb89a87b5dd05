import { readdir } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  CLOSED_REGISTRY,
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  type OpencodeServer,
  runOpencode,
  startOpencodeServer,
} from "../../scripts/opencode-harness.js";

interface ChatRequest {
  messages: Array<{ role: string; content: unknown }>;
}

/** A minimal streaming chat-completions model: replies "ACK: <last user text>", titles get "Smoke title". */
async function startTinyModel(): Promise<{ url: string; requests: ChatRequest[]; close(): Promise<void> }> {
  const requests: ChatRequest[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => {
      body += chunk.toString("utf8");
    });
    req.on("end", () => {
      if (!req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end("{}");
        return;
      }
      const request = JSON.parse(body) as ChatRequest;
      requests.push(request);
      const system = JSON.stringify(request.messages.filter((message) => message.role === "system"));
      const lastUser = request.messages.filter((message) => message.role === "user").at(-1);
      const text = system.includes("title generator") ? "Smoke title" : `ACK: ${String(lastUser?.content)}`;
      const chunk = (delta: object, finish: string | null = null) =>
        `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "fake", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: text }));
      res.write(chunk({}, "stop"));
      const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
      res.end(
        `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "fake", choices: [], usage })}\n\ndata: [DONE]\n\n`,
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve) => (server as Server).close(() => resolve())),
  };
}

/** An npm registry that only counts requests (answers 404), to prove that OpenCode fetches nothing. */
async function startTripwireRegistry(): Promise<{ url: string; hits: string[]; close(): Promise<void> }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    hits,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const mainRequests = (requests: ChatRequest[]) =>
  requests.filter((request) => !JSON.stringify(request.messages).includes("title generator"));

describe("e2e harness (real opencode 1.18.33)", () => {
  let model: Awaited<ReturnType<typeof startTinyModel>>;
  const envs: OpencodeEnv[] = [];

  beforeAll(async () => {
    model = await startTinyModel();
  });
  afterEach(async () => {
    // Sharing environments first: their project and data dirs live under the environment they share with.
    for (const env of envs.splice(0).reverse()) await cleanupOpencodeEnv(env);
  });
  afterAll(async () => {
    await model.close();
  });

  it("runOpencode completes a prompt with the registry unreachable, fetching nothing, and continues it", async () => {
    const env = await createOpencodeEnv({ modelUrl: model.url });
    envs.push(env);
    expect(env.env.npm_config_registry).toBe(CLOSED_REGISTRY);
    const prompt = 'two words and "a quoted phrase"\nsecond line';

    const started = Date.now();
    const first = await runOpencode(env, prompt, { timeoutMs: 60_000 });
    expect(first.code, first.stderr).toBe(0);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(first.sessionId).toMatch(/^ses_/);
    expect(first.text).toBe(`ACK: ${prompt}`);
    expect(mainRequests(model.requests).at(-1)?.messages.at(-1)).toEqual({ role: "user", content: prompt });
    // Nothing was installed into the pre-populated config dir.
    const configModules = join(env.env.XDG_CONFIG_HOME as string, "opencode", "node_modules");
    expect(await readdir(configModules)).toEqual(["@opencode-ai"]);
    expect(await readdir(join(configModules, "@opencode-ai"))).toEqual(["plugin"]);

    // A registry that answers: still not a single request. --session continues the same session.
    const registry = await startTripwireRegistry();
    try {
      const continued = await runOpencode(
        { ...env, env: { ...env.env, npm_config_registry: registry.url } },
        "follow-up",
        { session: first.sessionId, timeoutMs: 60_000 },
      );
      expect(continued.code, continued.stderr).toBe(0);
      expect(continued.sessionId).toBe(first.sessionId);
      expect(continued.text).toBe("ACK: follow-up");
      expect(
        mainRequests(model.requests)
          .at(-1)
          ?.messages.map((message) => message.role),
      ).toEqual(["system", "user", "assistant", "user"]);
      expect(registry.hits).toEqual([]);
    } finally {
      await registry.close();
    }
  }, 150_000);

  it("serves a session round trip and shares it with a second process on the same data dir", async () => {
    const env = await createOpencodeEnv({ modelUrl: model.url });
    envs.push(env);
    let server: OpencodeServer | undefined;
    try {
      server = await startOpencodeServer(env);
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const sessionId = await server.createSession("smoke");
      expect(sessionId).toMatch(/^ses_/);
      await server.prompt(sessionId, "hello server");
      await server.waitIdle(sessionId, 60_000);
      const messages = await server.messages(sessionId);
      expect(messages.map((message) => message.info.role)).toEqual(["user", "assistant"]);
      expect(messages[0].parts.find((part: { type: string }) => part.type === "text")?.text).toBe("hello server");
      expect(messages[1].info.time.completed).toBeGreaterThan(0);
      expect(messages[1].info.finish).toBe("stop");
      // The instance is the project dir (the harness sets PWD; an inherited PWD would win over cwd).
      expect(messages[1].info.path.cwd).toBe(env.projectDir);
      expect(messages[1].parts.find((part: { type: string }) => part.type === "text")?.text).toBe("ACK: hello server");
      expect(server.events().some((event) => event.type === "session.idle")).toBe(true);

      // A second "terminal": same data dir and project, its own config and process.
      const other = await createOpencodeEnv({ modelUrl: model.url, shareDataWith: env });
      envs.push(other);
      expect(other.projectDir).toBe(env.projectDir);
      const continued = await runOpencode(other, "from the other terminal", { session: sessionId, timeoutMs: 60_000 });
      expect(continued.code, continued.stderr).toBe(0);
      expect(continued.text).toBe("ACK: from the other terminal");
      const after = await server.messages(sessionId);
      expect(after.map((message) => message.info.role)).toEqual(["user", "assistant", "user", "assistant"]);
    } finally {
      await server?.stop();
    }
    expect(server.output()).toContain("opencode server listening on");
  }, 150_000);
});
