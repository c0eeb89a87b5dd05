/**
 * The memory tools as the model sees them: names, descriptions and arguments, and nothing that runs them. Kept apart
 * from plugin/tools/tools.ts so that the plugin's main thread (plugin/transport/remote-hooks.ts) can declare the tools to OpenCode
 * without importing the memory service: the tools run in the plugin's thread.
 */
import type { ToolContext } from "@opencode-ai/plugin";
import { type ArgSpecs, jsonSchemaArgs } from "./args.js";

const REF = { type: "string", maxLength: 300, description: "A ref from memory or a memory tool result" } as const;

/** A paged tool's page size argument. */
function pageLimit(what: string, fallback: number) {
  return {
    type: "integer",
    minimum: 1,
    maximum: 50,
    optional: true,
    description: `${what} per page, 1-50 (default ${fallback})`,
  } as const;
}

/**
 * Named `memory_*`: OpenCode 1.18.33 lets a plugin tool silently replace a built-in of the same name (facts §4), and
 * seed 004 saw generic names shadow the harness's own tools. Every result is bounded and paged.
 */
export const MEMORY_TOOL_SPECS = {
  memory_zoom: {
    description:
      "Open a memory line by its ref, exactly as shown (pub:24+1, 0+8, <session>:<generation>:0+8): a summary opens into its two finer lines, a publication into its session's lines, a message into its exact original text (paged by cursor).",
    args: {
      ref: REF,
      cursor: { type: "string", maxLength: 100, optional: true, description: "The cursor ending the previous page" },
    },
  },
  memory_search: {
    description:
      "Find a literal detail the summaries dropped in this project's memory (this conversation and other sessions' published turns). Write the distinctive words you expect (names, numbers, paths, identifiers, errors; or a question): rarer words weigh more and not every word must occur (match all: each must; \"quote phrases\"). Hits, best first, show a ref, kind, session, time and excerpt: open one with memory_zoom. Paged by cursor.",
    args: {
      query: { type: "string", minLength: 1, maxLength: 2000, description: "Words to find, or a question" },
      match: { type: "enum", values: ["all", "any"], optional: true, description: "any (default) or all words" },
      session: {
        type: "string",
        maxLength: 200,
        optional: true,
        description: "Only this session id (memory_sessions)",
      },
      before: { type: "string", maxLength: 40, optional: true, description: "ISO 8601: only older" },
      after: { type: "string", maxLength: 40, optional: true, description: "ISO 8601: only newer" },
      cursor: { type: "string", maxLength: 40, optional: true, description: "The previous page's cursor" },
      limit: pageLimit("Hits", 10),
    },
  },
  memory_date: {
    description: "First and last time (ISO 8601) of the messages under a memory ref.",
    args: { ref: REF },
  },
  memory_sessions: {
    description:
      "This project's sessions visible to this turn (id, title, when, turns published), newest first, paged.",
    args: {
      cursor: { type: "string", maxLength: 100, optional: true, description: "The previous page's cursor" },
      limit: pageLimit("Sessions", 20),
    },
  },
  memory_inspect: {
    description:
      "Health of optchat memory for this session, its verdict first (last injection, compactor workers, backlog and failures, last publication, lease, recent errors): use it when memory looks missing or stale.",
    args: {
      format: {
        type: "enum",
        values: ["text", "json"],
        optional: true,
        description: "text (default: readable, the verdict first) or json (the full report)",
      },
    },
  },
} as const satisfies Record<string, { readonly description: string; readonly args: ArgSpecs }>;

export type MemoryToolName = keyof typeof MEMORY_TOOL_SPECS;

/**
 * The memory tools as OpenCode is given them, each call run by `run` (on the plugin's thread or server, or once the
 * side beside OpenCode is set up): the one place that turns the specs into OpenCode's tool declarations.
 */
export function declaredMemoryTools(
  run: (name: MemoryToolName, args: unknown, context: ToolContext) => Promise<string>,
): Record<string, unknown> {
  const tools: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(MEMORY_TOOL_SPECS)) {
    tools[name] = {
      description: spec.description,
      args: jsonSchemaArgs(spec.args),
      execute: (args: unknown, context: ToolContext): Promise<string> => run(name as MemoryToolName, args, context),
    };
  }
  return tools;
}
