/**
 * The memory tools (plugin/tools) offered to V2's model through `ctx.tool.transform`, answered from the memory
 * service; `memory_inspect` reports this process (V2's) and the stored session, without V1's per-process injection
 * record (`lastInjectionThisProcess` is null under V2).
 */
import type { Memory, Turn } from "../../src/memory/index.js";
import type { ToolsBackend } from "../tools/backend.js";
import { memoryTools } from "../tools/tools.js";
import { V2_HOST, type V2Runtime } from "./runtime.js";
import type { V2Context } from "./v2-api.js";

/** Declares the tools; resolves once V2 took them (a failure is reported: the turn runs without them). */
export async function registerMemoryTools(ctx: V2Context, runtime: V2Runtime): Promise<void> {
  const declared = ctx.tool?.transform((registry) => {
    const tools = memoryTools(async () => backendOf(runtime, await runtime.memory()), "opencode-v2");
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
  await Promise.resolve(declared).catch((error) => runtime.report("declaring the memory tools", error));
}

/** What the tools read of the host: the memory service, the calling session's admitted turn, this process. */
function backendOf(runtime: V2Runtime, memory: Memory): ToolsBackend {
  const { health } = runtime;
  return {
    host: V2_HOST,
    memory,
    config: runtime.config,
    async toolTurn(hostSessionId: string): Promise<Turn> {
      const turn = runtime.known(hostSessionId)?.turn;
      if (!turn) throw new Error("optchat: no turn of this session was admitted by optchat in this process");
      return turn;
    },
    sessionOf: () => undefined,
    status: () => ({
      holder: `opencode-v2:${process.pid}`,
      startedAt: health.startedAt,
      worker: health.workerError ? "failed" : "running in this process",
      workerStartReason: "started with the memory service (plugin/v2/runtime.ts)",
      workerError: health.workerError,
      workerLastEvent: undefined,
      problems: health.problems,
      lastProblem: health.lastProblem,
    }),
  };
}
