/**
 * The V2 host: OpenCode V2's session hooks and bus events onto the same memory service (src/memory) the V1 adapter
 * uses. What it does, and what it does not do yet, is in docs/opencode-v2-notes.md "The V2 host".
 *
 * - `prompt`: the session is opened in memory, the turn admitted (turn id = V2's user message id), the user record
 *   ingested. Awaited by V2 before the first request.
 * - bus events (`ctx.event.subscribe()`): every finished text (`session.text.ended`), tool call
 *   (`session.tool.called`, named by `session.tool.input.started`) and tool result (`session.tool.success|failed`)
 *   becomes a record; `session.execution.succeeded|failed` ends the turn with its outcome.
 * - `context`: the memory (shared and own blocks) leads the request as one user message, built once per turn and
 *   reused byte for byte by the turn's later steps. No cache mark is added: V2's four stay where they were.
 * - `compaction`: answered from optchat's own view of the session (`result`), so V2 asks no model.
 * - the memory tools, through `ctx.tool.transform`.
 */
import {
  type AssembledContext,
  estimateTokens,
  isOptchatError,
  type Memory,
  openMemory,
  startWorker,
  type Turn,
} from "../../src/memory/index.js";
import { resolvePluginConfig } from "../base/config.js";
import { projectScopeId } from "../base/identity.js";
import { MEMORY_HEAD } from "../request/memory-message.js";
import { memoryTools } from "../tools/tools.js";
import { v2Records } from "./records.js";
import type { V2CompactionInput, V2Context, V2ContextInput, V2Event, V2PromptInput } from "./v2-api.js";

/** Host name of V2 sessions in optchat (V1's are "opencode"): the two lines keep their own session ids. */
export const V2_HOST = "opencode-v2";

/** The model's window when V2 does not say it in the hook (`OPTCHAT_V2_WINDOW_TOKENS`, default 128000). */
const DEFAULT_WINDOW = 128_000;
const RESERVE_TOKENS = 1_000;
/** How long the finalizer lets events already published arrive before it flushes. */
const CLOSE_GRACE_MS = 300;

interface SessionEntry {
  sessionId: string;
  turn: Turn | undefined;
  /** The memory message of the current turn, reused by its later steps (cache-stable). */
  memoryText: { turnId: string; text: string } | undefined;
  /** Ingestion and outcomes of this session, in order. */
  queue: Promise<void>;
}

/**
 * Starts the host; the function returned is V2's finalizer for the plugin (setup's return value, awaited when V2
 * closes the plugin's scope, e.g. at the end of `opencode run`): it lets late events arrive, flushes every session's
 * queue (bounded) and closes the worker and the memory service.
 */
export async function startV2Host(ctx: V2Context): Promise<() => Promise<void>> {
  const config = resolvePluginConfig(ctx.options, process.env);
  const directory = ctx.location?.directory ?? process.cwd();
  const scopeId = projectScopeId({
    id: ctx.location?.project?.id ?? "global",
    worktree: ctx.location?.project?.directory ?? directory,
    directory,
  });
  const windowTokens = Number(process.env.OPTCHAT_V2_WINDOW_TOKENS ?? DEFAULT_WINDOW);
  const problems: string[] = [];
  const report = (where: string, error: unknown) => {
    const text = `${where}: ${isOptchatError(error) ? `${error.code}: ` : ""}${error instanceof Error ? error.message : String(error)}`;
    problems.push(text);
    if (process.env.OPTCHAT_V2_DEBUG) process.stderr.write(`optchat (OpenCode V2): ${text}\n`);
  };

  let memoryOpen: Promise<Memory> | undefined;
  let worker: Promise<{ stop(): Promise<unknown> } | undefined> | undefined;
  const memory = () => {
    memoryOpen ??= openMemory(config.core, { applicationName: `optchat-opencode-v2-${process.pid}` }).then(
      (opened) => {
        // The compactor works in this process too (V2's service is long-lived; a standalone run helps while it lasts).
        worker = startWorker(opened, config.core, () => {}).catch((error) => {
          report("compactor worker", error);
          return undefined;
        });
        return opened;
      },
      (error) => {
        memoryOpen = undefined;
        throw error;
      },
    );
    return memoryOpen;
  };
  void memory().catch((error) => report("opening memory", error));

  const sessions = new Map<string, SessionEntry>();
  const entryOf = async (hostSessionId: string): Promise<SessionEntry> => {
    const known = sessions.get(hostSessionId);
    if (known) return known;
    const session = await (await memory()).openSession({ host: V2_HOST, hostSessionId, scopeId });
    const entry = sessions.get(hostSessionId) ?? {
      sessionId: session.sessionId,
      turn: undefined,
      memoryText: undefined,
      queue: Promise.resolve(),
    };
    sessions.set(hostSessionId, entry);
    return entry;
  };
  const enqueue = (entry: SessionEntry, where: string, job: () => Promise<unknown>) => {
    entry.queue = entry.queue.then(job).then(
      () => undefined,
      (error) => report(where, error),
    );
    return entry.queue;
  };

  const records = v2Records();
  ctx.session.hook("prompt", async (input: V2PromptInput) => {
    try {
      const mem = await memory();
      const entry = await entryOf(input.sessionID);
      await entry.queue;
      if (entry.turn && entry.turn.state === "active") {
        await mem.finishTurn({ sessionId: entry.sessionId, turnId: entry.turn.turnId }, "interrupted");
      }
      entry.turn = await mem.admitTurn({
        sessionId: entry.sessionId,
        turnId: input.messageID,
        query: input.prompt.text,
      });
      entry.memoryText = undefined;
      await mem.ingest(records.user(entry.sessionId, input));
    } catch (error) {
      report("prompt", error);
    }
  });

  ctx.session.hook("context", async (input: V2ContextInput) => {
    try {
      const entry = sessions.get(input.sessionID);
      const turn = entry?.turn;
      if (!entry || !turn) return;
      if (entry.memoryText?.turnId !== turn.turnId) {
        const assembled = await (await memory()).assembleContext(
          { sessionId: entry.sessionId, turnId: turn.turnId },
          {
            windowTokens,
            instructionsTokens: estimateTokens(JSON.stringify(input.system) + JSON.stringify(input.tools)),
            activeTokens: estimateTokens(JSON.stringify(input.messages)),
            outputTokens: input.options?.maxTokens ?? 4_000,
            reserveTokens: RESERVE_TOKENS,
            readiness: "partial",
            waitMs: 2_000,
          },
        );
        entry.memoryText = { turnId: turn.turnId, text: memoryMessageText(assembled) };
      }
      if (entry.memoryText.text === "") return;
      input.messages.unshift({ role: "user", content: [{ type: "text", text: entry.memoryText.text }] });
    } catch (error) {
      report("context", error);
    }
  });

  ctx.session.hook("compaction", async (input: V2CompactionInput) => {
    try {
      const entry = await entryOf(input.sessionID);
      await entry.queue;
      const view = await (await memory()).view(entry.sessionId, { budget: 8_000 });
      const lines = view.lines.map((line) => line.text);
      input.result = {
        summary: [
          "optchat's summary of this session so far (memory_zoom opens any ref down to the exact messages):",
          ...lines,
        ].join("\n"),
        metadata: { optchat: { revision: view.revision, lines: lines.length } },
      };
    } catch (error) {
      // Left unset, V2 compacts natively: the person's turn goes on either way.
      report("compaction", error);
    }
  });

  const toolsDeclared = ctx.tool?.transform((registry) => {
    const adapterLike = {
      get memory() {
        return memoryRef;
      },
      async toolTurn(hostSessionId: string): Promise<Turn> {
        const entry = sessions.get(hostSessionId);
        if (!entry?.turn) throw new Error("optchat: no turn of this session was admitted by optchat in this process");
        return entry.turn;
      },
    };
    let memoryRef: Memory | undefined;
    // The V2 host runs in OpenCode's own process.
    const tools = memoryTools(async () => {
      memoryRef = await memory();
      return adapterLike as never;
    }, "opencode");
    for (const [name, tool] of Object.entries(tools)) {
      registry.add({
        name,
        // Offered to the model directly, as V2's own tools are, not only inside Code Mode's `execute`.
        options: { codemode: false },
        description: tool.description,
        input: tool.args,
        // V2 reads a tool's answer as an object: `content` parts (`output` only for a tool that declares an output
        // schema; a plain string is refused: "a is not an Object").
        execute: async (args, context) => ({
          content: [{ type: "text", text: await tool.execute(args as never, context as never) }],
        }),
      });
    }
  });

  await Promise.resolve(toolsDeclared).catch((error) => report("declaring the memory tools", error));

  void (async () => {
    for await (const event of ctx.event.subscribe()) {
      const sessionId = event.data?.sessionID;
      if (typeof sessionId !== "string") continue;
      const entry = sessions.get(sessionId);
      if (!entry?.turn) continue;
      handleEvent(entry, event);
    }
  })().catch((error) => report("events", error));

  return async () => {
    // Events published just before the scope closes (the turn's last text, its end) are still on their way.
    await new Promise((resolve) => setTimeout(resolve, CLOSE_GRACE_MS));
    const flush = Promise.all([...sessions.values()].map((entry) => entry.queue));
    await Promise.race([flush, new Promise((resolve) => setTimeout(resolve, config.plugin.closeFlushMs))]);
    const running = await worker;
    await running?.stop().catch((error: unknown) => report("stopping the compactor worker", error));
    const opened = await memoryOpen?.catch(() => undefined);
    await opened?.close().catch((error: unknown) => report("closing memory", error));
  };

  function handleEvent(entry: SessionEntry, event: V2Event): void {
    const turn = entry.turn as Turn;
    if (event.type === "session.execution.succeeded" || event.type === "session.execution.failed") {
      const outcome = event.type === "session.execution.succeeded" ? "completed" : "failed";
      void enqueue(entry, event.type, async () => {
        await (await memory()).finishTurn({ sessionId: entry.sessionId, turnId: turn.turnId }, outcome);
      });
      return;
    }
    const record = records.fromEvent(entry.sessionId, turn.turnId, event);
    if (record) void enqueue(entry, event.type, async () => (await memory()).ingest(record));
  }
}

function memoryMessageText(assembled: AssembledContext): string {
  const blocks = assembled.blocks.filter((block) => block.text.length > 0);
  if (blocks.length === 0) return "";
  return [MEMORY_HEAD, ...blocks.map((block) => block.text)].join("\n\n");
}
