// size: the memory tools are one table of five tools, each entry a few lines.
import type { ToolContext } from "@opencode-ai/plugin";
import {
  budgetSettingsOf,
  escapeMemoryText,
  inspectStoredSession,
  inspectText,
  isOptchatError,
  type SearchAnswer,
  type ZoomAnswer,
} from "../../src/memory/index.js";
import { HOST, type PluginRunner } from "../base/identity.js";
import { requestSlice } from "../request/slice.js";
import { holderIsDead } from "../turns/lease.js";
import type { ToolsBackend } from "./backend.js";

/** Where the tools run: one of V1's runners, or V2's host (plugin/v2). */
export type ToolsRunner = PluginRunner | "opencode-v2";

/** memory_inspect's `runsIn`: where this process's plugin work runs (and on what, for the local server). */
function runsIn(runner: ToolsRunner): string {
  if (runner === "opencode") return "OpenCode's thread";
  if (runner === "thread") return "the plugin's own thread";
  if (runner === "opencode-v2") return `OpenCode V2's process (plugin/v2, pid ${process.pid})`;
  const bun = (process.versions as { bun?: string }).bun;
  const runtime = bun ? `Bun ${bun}` : `Node.js ${process.versions.node}`;
  return `the optchat local server (plugin/transport/local-server/server.ts, on ${runtime}), shared by OpenCode processes`;
}

import { type ArgsOf, jsonSchemaArgs, parseToolArgs } from "./args.js";
import { MEMORY_TOOL_SPECS, type MemoryToolName } from "./specs.js";

/** Largest zoom page handed to the model, in estimated tokens; longer messages continue with the cursor. */
const ZOOM_PAGE_TOKENS = 6_000;

/** A memory tool as OpenCode 1.18.33 takes it: JSON Schema arguments, checked by `execute` (plugin/tools/args.ts). */
export interface MemoryTool {
  readonly description: string;
  readonly args: Record<string, Record<string, unknown>>;
  execute(args: unknown, context: ToolContext): Promise<string>;
}

/**
 * The memory tools, run by the adapter (their names, descriptions and arguments: plugin/tools/specs.ts). Every result is
 * bounded and paged.
 */
export function memoryTools(
  ready: () => Promise<ToolsBackend>,
  runner: ToolsRunner,
): Record<MemoryToolName, MemoryTool> {
  const memoryTool = <const Name extends MemoryToolName>(
    name: Name,
    work: (
      args: ArgsOf<(typeof MEMORY_TOOL_SPECS)[Name]["args"]>,
      context: ToolContext,
      adapter: ToolsBackend,
    ) => Promise<string>,
  ): MemoryTool => {
    const { description, args: specs } = MEMORY_TOOL_SPECS[name];
    return {
      description,
      args: jsonSchemaArgs(specs),
      async execute(raw, context) {
        try {
          const args = parseToolArgs(name, specs, raw);
          return await work(args, context, await ready());
        } catch (error) {
          // A thrown error becomes the tool's result text; say what failed and what to try.
          if (isOptchatError(error)) throw new Error(`${name} failed: ${error.code}: ${error.message}`);
          throw new Error(`${name} failed: ${error instanceof Error ? error.message : String(error)}`);
        }
      },
    };
  };
  return {
    memory_zoom: memoryTool("memory_zoom", async (args, ctx, adapter) => {
      const turn = await adapter.toolTurn(ctx.sessionID, ctx.messageID);
      const answer = await adapter.memory.zoom(turn, args.ref, {
        maxTokens: ZOOM_PAGE_TOKENS,
        ...(args.cursor ? { cursor: args.cursor } : {}),
      });
      return renderZoom(answer);
    }),
    memory_search: memoryTool("memory_search", async (args, ctx, adapter) => {
      const turn = await adapter.toolTurn(ctx.sessionID, ctx.messageID);
      const search = (match: "all" | "any") =>
        adapter.memory.search(turn, {
          query: args.query,
          match,
          ...(args.session ? { sessionId: args.session } : {}),
          ...(args.before ? { before: args.before } : {}),
          ...(args.after ? { after: args.after } : {}),
          ...(args.cursor ? { cursor: args.cursor } : {}),
          limit: args.limit ?? 10,
        });
      const asked = args.match ?? "any";
      const answer = await search(asked);
      // Every word rarely occurs in one text: with match all and nothing found, fall back to any word, and say so.
      if (answer.hits.length === 0 && asked === "all" && !args.cursor && /\s/.test(args.query.trim())) {
        const any = await search("any");
        if (any.hits.length > 0) {
          return `No text has every word; texts with any of them, best first:\n${renderSearch(args.query, any, "any")}`;
        }
      }
      return renderSearch(args.query, answer, asked);
    }),
    memory_date: memoryTool("memory_date", async (args, ctx, adapter) => {
      const turn = await adapter.toolTurn(ctx.sessionID, ctx.messageID);
      const answer = await adapter.memory.date(turn, args.ref);
      return `ref ${answer.ref}: first ${answer.first}, last ${answer.last}`;
    }),
    memory_sessions: memoryTool("memory_sessions", async (args, ctx, adapter) => {
      const turn = await adapter.toolTurn(ctx.sessionID, ctx.messageID);
      const answer = await adapter.memory.sessions(turn, {
        limit: args.limit ?? 20,
        ...(args.cursor ? { cursor: args.cursor } : {}),
      });
      const lines = answer.sessions.map((s) => escapeMemoryText(JSON.stringify(s)));
      return [
        `<memory_sessions snapshot="${answer.snapshot.publicationHighWater}">`,
        ...lines,
        "</memory_sessions>",
        answer.nextCursor ? `more: call memory_sessions with cursor "${answer.nextCursor}"` : "end of list",
      ].join("\n");
    }),
    memory_inspect: memoryTool("memory_inspect", async (args, ctx, adapter) => {
      const report = await inspectSession(adapter, ctx.sessionID, runner);
      return args.format === "json" ? JSON.stringify(report, null, 2) : await inspectReportText(report);
    }),
  };
}

/** Runtime health of one host session: what makes "working" and "silently dead" look different (seed 004). */
export async function inspectSession(
  adapter: ToolsBackend,
  hostSessionId: string,
  runner: ToolsRunner,
): Promise<Record<string, unknown>> {
  const state = adapter.sessionOf(hostSessionId);
  const session = state?.session ?? (await adapter.memory.host.findSession(adapter.host ?? HOST, hostSessionId));
  const process = adapter.status();
  const report: Record<string, unknown> = {
    process: {
      holder: process.holder,
      startedAt: process.startedAt.toISOString(),
      runsIn: runsIn(runner),
      embeddedWorker: process.worker,
      workerStartedBecause: process.workerStartReason ?? null,
      workerLastEvent: process.workerLastEvent ?? null,
      workerError: process.workerError ?? null,
      problemsSinceStart: process.problems,
      lastProblem: process.lastProblem ?? null,
    },
    settings: {
      mode: adapter.config.plugin.mode,
      scope: adapter.config.plugin.scope,
      readiness: adapter.config.plugin.readiness,
      readinessWaitMs: adapter.config.plugin.readinessWaitMs,
      summarizer: adapter.config.core.summarizer,
    },
  };
  if (!session) {
    report.session = `optchat holds nothing for OpenCode session ${hostSessionId} yet (no prompt of it was admitted by the plugin)`;
    return report;
  }
  if (state?.disabled) report.memoryDisabled = state.disabled;
  report.lastInjectionThisProcess = (state && requestSlice(state).lastInjection) ?? null;
  Object.assign(
    report,
    await inspectStoredSession(adapter.memory, session, {
      holderIsGone: holderIsDead,
      budget: budgetSettingsOf(adapter.config.core),
      embeddedWorker: adapter.config.plugin.embeddedWorker ? "on" : "off",
    }),
  );
  return report;
}

/** memory_inspect's text: the verdicts first, then this process and its settings, then the session's health. */
async function inspectReportText(report: Record<string, unknown>): Promise<string> {
  const process = report.process as Record<string, unknown>;
  const settings = report.settings as Record<string, unknown>;
  const extra = [
    `process    runs in ${process.runsIn}; holder ${process.holder} since ${process.startedAt}; embedded worker ${process.embeddedWorker}${process.workerStartedBecause ? ` (started because ${process.workerStartedBecause})` : ""}${process.workerError ? `, error: ${process.workerError}` : ""}; ${process.problemsSinceStart} problem(s) since start${process.lastProblem ? `, last: ${JSON.stringify(process.lastProblem)}` : ""}`,
    `settings   mode ${settings.mode}, scope ${settings.scope}, readiness ${settings.readiness} (waits ${settings.readinessWaitMs} ms), summarizer ${settings.summarizer}`,
  ];
  if (typeof report.session === "string") return [`verdict    ${report.session}`, ...extra].join("\n");
  const disabled = report.memoryDisabled ? [`disabled   ${JSON.stringify(report.memoryDisabled)}`] : [];
  return await inspectText(report, [...extra, ...disabled]);
}

/** Text made safe to sit inside a tag: `<`, `>` and `&` escaped, newlines kept (originals stay readable). */
function escapeKeepingLines(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function renderZoom(answer: ZoomAnswer): string {
  const snapshot = `snapshot="${answer.snapshot.publicationHighWater}"`;
  switch (answer.kind) {
    case "lines":
      return [
        `<memory_zoom ref="${answer.ref}" ${snapshot}>`,
        ...answer.lines.map((line) => `${line.ref}|${escapeMemoryText(line.text)}`),
        "</memory_zoom>",
      ].join("\n");
    case "publication":
      return [
        `<memory_publication ref="${answer.ref}" session="${answer.sessionId}" generation="${answer.generation}" outcome="${answer.outcome}" range="${answer.range}" completed="${answer.completedAt}" ${snapshot}>`,
        "The turn's messages, as session lines (open them with memory_zoom):",
        ...answer.cover.map((line) => `${line.ref}|${escapeMemoryText(line.text)}`),
        "</memory_publication>",
      ].join("\n");
    case "message":
      return [
        `<original_message ref="${answer.ref}" kind="${answer.recordKind}"${answer.toolName ? ` tool="${answer.toolName}"` : ""} at="${answer.occurredAt}" bytes="${answer.offset}-${answer.offset + Buffer.byteLength(answer.text)} of ${answer.totalBytes}"${answer.hostTruncated ? ' host_truncated="true"' : ""}>`,
        escapeKeepingLines(answer.text),
        "</original_message>",
        answer.nextCursor
          ? `more: call memory_zoom with ref "${answer.ref}" and cursor "${answer.nextCursor}"`
          : "end of message",
      ].join("\n");
  }
}

function renderSearch(query: string, answer: SearchAnswer, match: "all" | "any"): string {
  if (answer.hits.length === 0) return `No match for "${escapeMemoryText(query)}" in memory visible to this turn.`;
  return [
    `<memory_search snapshot="${answer.snapshot.publicationHighWater}">`,
    ...answer.hits.map(
      (hit) =>
        `${hit.ref}|${hit.source}${hit.kind ? ` ${hit.kind}` : ""}${hit.sessionId ? ` session ${hit.sessionId}` : ""}${hit.occurredAt ? ` ${hit.occurredAt}` : ""}${hit.within ? ` in ${hit.within}` : ""}|${escapeMemoryText(hit.excerpt)}`,
    ),
    "</memory_search>",
    answer.nextCursor
      ? `more: call memory_search with the same query, match "${match}" and cursor "${answer.nextCursor}"`
      : "end of results",
  ].join("\n");
}
