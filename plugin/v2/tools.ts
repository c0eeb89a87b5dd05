/**
 * The memory tools (plugin/tools) offered to V2's model through `ctx.tool.transform`: `memory_zoom`,
 * `memory_search`, `memory_date`, `memory_sessions` answer from the memory service; `memory_inspect` needs the V1
 * adapter's state and answers with an error here.
 */
import type { Memory, Turn } from "../../src/memory/index.js";
import { memoryTools } from "../tools/tools.js";
import type { V2Runtime } from "./runtime.js";
import type { V2Context } from "./v2-api.js";

/** Declares the tools; resolves once V2 took them (a failure is reported: the turn runs without them). */
export async function registerMemoryTools(ctx: V2Context, runtime: V2Runtime): Promise<void> {
  const declared = ctx.tool?.transform((registry) => {
    const tools = memoryTools(async () => adapterFor(runtime, await runtime.memory()) as never, "opencode");
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

/** What the tools read of the V1 adapter: the memory service and the calling session's admitted turn. */
function adapterFor(runtime: V2Runtime, memory: Memory) {
  return {
    memory,
    async toolTurn(hostSessionId: string): Promise<Turn> {
      const turn = runtime.known(hostSessionId)?.turn;
      if (!turn) throw new Error("optchat: no turn of this session was admitted by optchat in this process");
      return turn;
    },
  };
}
