import { parseArgs } from "node:util";
import { isOptchatError, OptchatError } from "../core/errors.js";
import { type Config, redactUrl, resolveConfig } from "../memory/config.js";
import { inspectStoredSession } from "../memory/inspect.js";
import { migrateAll } from "../memory/migrate.js";
import { openMemory, type PayloadPage } from "../memory/service.js";
import { readStatus } from "../memory/status.js";
import { lineAsText, viewAsText } from "../memory/views.js";
import { startWorker } from "../memory/worker.js";
import { BROWSE_USAGE, browseCommand, EXPORT_HTML_USAGE, exportHtmlCommand } from "./browse.js";
import { importCommand } from "./import.js";

const USAGE = `optchat — shared, never-ending memory for OpenCode, kept in PostgreSQL

Usage:
  optchat migrate [--json]                  create the database if missing and apply the schema migrations
  optchat status  [--json]                  server, schema version and row counts per table
  optchat worker  [--concurrency N] [--json]
                                            run a compactor worker until SIGTERM/SIGINT (finishes running jobs)
  optchat view <session> [--budget BYTES] [--json]
                                            the session's view as a model sees it: start+count|text lines
  optchat zoom <session> <start+count> [--json]
                                            open a line of a session's tree; start+1 prints the whole message
  optchat zoom --scope <scope> <ref> [--json]
                                            open a ref (pub:0+8, <session>:<generation>:0+4) at the scope's latest
                                            snapshot, exactly as a new turn would see it
  optchat search --scope <scope> <query...> [--any] [--session ID] [--before ISO] [--after ISO] [--cursor C] [--json]
                                            every word must occur, or any of them with --any (best first)
  optchat sessions --scope <scope> [--cursor C] [--json]
  optchat import <file.jsonl> [--json]      import sessions and turns from a JSONL file (docs/import.md)
  optchat audit [--json]                    check publications, snapshots, views and reachability; exit 1 on a violation
  optchat inspect <session> [--json]        a session's health (by optchat id or OpenCode session id): records,
                                            summaries, publications, failures, lease, last injection, recent problems
  ${BROWSE_USAGE}
                                            a local read-only web UI of the whole memory (docs/browse.md)
  ${EXPORT_HTML_USAGE}
                                            the same pages as static files, linked relatively
  optchat help

Settings come from the environment; README "Configuration" lists them all (DATABASE_URL, OPTCHAT_SUMMARIZER, ...).`;

interface Output {
  json: boolean;
  out: (line: string) => void;
  err: (line: string) => void;
}

/** Runs one command; returns the process exit code. Never throws. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [command, ...rest] = argv;
  const json = rest.includes("--json");
  const output: Output = {
    json,
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
  };
  try {
    switch (command) {
      case "migrate":
        return await migrateCommand(rest, resolveConfig({ env }), output);
      case "status":
        return await statusCommand(rest, resolveConfig({ env }), output);
      case "worker":
        return await workerCommand(rest, resolveConfig({ env }), output);
      case "view":
        return await viewCommand(rest, resolveConfig({ env }), output);
      case "zoom":
        return rest.includes("--scope")
          ? await scopedCommand("zoom", rest, resolveConfig({ env }), output)
          : await zoomCommand(rest, resolveConfig({ env }), output);
      case "search":
      case "sessions":
        return await scopedCommand(command, rest, resolveConfig({ env }), output);
      case "audit":
        return await auditCommand(rest, resolveConfig({ env }), output);
      case "import":
        return await importCommand(rest, resolveConfig({ env }), output);
      case "inspect":
        return await inspectCommand(rest, resolveConfig({ env }), output);
      case "browse":
        return await browseCommand(rest, resolveConfig({ env }), output);
      case "export":
        return await exportHtmlCommand(rest, resolveConfig({ env }), output);
      case undefined:
      case "help":
      case "--help":
      case "-h":
        output.out(USAGE);
        return 0;
      default:
        output.err(`optchat: unknown command "${command}".\n\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    reportError(error, output);
    return 1;
  }
}

function reportError(error: unknown, output: Output): void {
  const payload = isOptchatError(error)
    ? error.toJSON()
    : { code: "INTERNAL", message: error instanceof Error ? error.message : String(error) };
  if (output.json) output.out(JSON.stringify({ ok: false, error: payload }));
  else output.err(`optchat: ${payload.code}: ${payload.message}`);
}

function options(args: readonly string[]): void {
  parseCommand(args, {}, 0);
}

/** Parses flags (--json always allowed) and exactly `positionals` positional arguments; names what is wrong. */
function parseCommand<O extends Record<string, { type: "string" | "boolean" }>>(
  args: readonly string[],
  flags: O,
  positionals: number,
  usage = "",
) {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: [...args],
      options: { json: { type: "boolean" }, ...flags },
      strict: true,
      allowPositionals: true,
    });
  } catch (error) {
    throw new OptchatError("INPUT_INVALID", `${(error as Error).message}${usage ? `\nUsage: ${usage}` : ""}`);
  }
  if (parsed.positionals.length !== positionals) {
    throw new OptchatError(
      "INPUT_INVALID",
      `expected ${positionals} argument(s), got ${parsed.positionals.length}${usage ? `\nUsage: ${usage}` : ""}`,
    );
  }
  return { values: parsed.values as Record<string, string | boolean | undefined>, positionals: parsed.positionals };
}

function integerFlag(value: string | boolean | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new OptchatError("INPUT_INVALID", `--${name} must be an integer from ${min} to ${max}, not ${String(value)}`);
  }
  return n;
}

async function workerCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const { values } = parseCommand(
    args,
    { concurrency: { type: "string" } },
    0,
    "optchat worker [--concurrency N] [--json]",
  );
  const concurrency = integerFlag(values.concurrency, "concurrency", 1, 64) ?? config.workerConcurrency;
  const memory = await openMemory(config, { applicationName: "optchat-worker" });
  const print = (event: Record<string, unknown>) => {
    if (output.json) output.out(JSON.stringify({ at: new Date().toISOString(), ...event }));
    else
      output.err(
        `[optchat worker] ${Object.entries(event)
          .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
          .join(" ")}`,
      );
  };
  const worker = await startWorker(
    memory,
    config,
    (event) => {
      // Built and started nodes are routine: printed only in --json mode, where a program reads them.
      if ((event.type !== "built" && event.type !== "summarizing") || output.json) print({ ...event });
    },
    { concurrency },
  );
  print({ type: "ready", pid: process.pid, concurrency, summarizer: config.summarizer });
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  print({ type: "stopping" });
  await worker.stop(30_000);
  await memory.close();
  print({ type: "stopped" });
  return 0;
}

async function viewCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const usage = "optchat view <session> [--budget BYTES] [--json]";
  const { values, positionals } = parseCommand(args, { budget: { type: "string" } }, 1, usage);
  const budget = integerFlag(values.budget, "budget", 1, 100_000_000);
  const memory = await openMemory(config, { applicationName: "optchat-cli" });
  try {
    const view = await memory.view(positionals[0] as string, budget === undefined ? {} : { budget });
    if (output.json) output.out(JSON.stringify({ ok: true, ...view }));
    else {
      output.out(viewAsText(view));
      output.err(
        `revision ${view.revision}, ${view.leafCount} messages, ${view.lines.length} lines, ${view.bytes} bytes${view.unbuilt ? `, ${view.unbuilt} not summarized yet` : ""}${view.projection ? `, projected to ${view.projection.budget} bytes${view.projection.fits ? "" : ` (does not fit: the smallest cover is ${view.projection.minimalBytes} bytes)`}` : ""}`,
      );
    }
    return view.projection && !view.projection.fits ? 3 : 0;
  } finally {
    await memory.close();
  }
}

async function zoomCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const { positionals } = parseCommand(args, {}, 2, "optchat zoom <session> <start+count> [--json]");
  const [sessionId, ref] = positionals as [string, string];
  const memory = await openMemory(config, { applicationName: "optchat-cli" });
  try {
    const result = await memory.zoomSession(sessionId, ref);
    if (result.kind === "children") {
      if (output.json) output.out(JSON.stringify({ ok: true, ...result }));
      else for (const line of result.lines) output.out(lineAsText(line));
      return 0;
    }
    const session = await memory.getSession(sessionId);
    const [record] = await memory.listRecords(sessionId, { fromSeq: result.seq, limit: 1 });
    if (!record) throw new OptchatError("REF_NOT_FOUND", `No message ${ref}`);
    const pages: string[] = [];
    let cursor: string | undefined;
    let page: PayloadPage;
    do {
      page = await memory.readPayload(
        { sessionId, generation: session.currentGeneration, seq: result.seq },
        { maxBytes: 1 << 20, ...(cursor ? { cursor } : {}) },
      );
      pages.push(page.text);
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    const text = pages.join("");
    if (output.json) {
      output.out(
        JSON.stringify({
          ok: true,
          ref: result.ref,
          kind: record.kind,
          occurredAt: record.occurredAt,
          toolName: record.toolName,
          validUtf8: page.validUtf8,
          hostTruncated: record.hostTruncated,
          text,
        }),
      );
    } else {
      output.out(
        `${result.ref}|${record.kind}${record.toolName ? ` ${record.toolName}` : ""} at ${record.occurredAt.toISOString()}:`,
      );
      output.out(text);
    }
    return 0;
  } finally {
    await memory.close();
  }
}

async function migrateCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  options(args);
  const log = output.json ? () => {} : (line: string) => output.err(`  ${line}`);
  if (!output.json) output.err(`Migrating ${redactUrl(config.databaseUrl)} ...`);
  const outcome = await migrateAll(config.databaseUrl, process.stderr.isTTY ? log : () => {});
  if (output.json) {
    output.out(JSON.stringify({ ok: true, database: redactUrl(config.databaseUrl), ...outcome }));
  } else {
    if (outcome.databaseCreated) output.out("Created the database.");
    output.out(
      outcome.applied.length > 0
        ? `Applied ${outcome.applied.length} migration(s): ${outcome.applied.join(", ")}. Schema version ${outcome.schemaVersion}.`
        : `Schema is up to date (version ${outcome.schemaVersion}).`,
    );
  }
  return 0;
}

async function statusCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  options(args);
  const status = await readStatus(config.databaseUrl);
  const expected = status.expectedSchemaVersion;
  const upToDate = status.schemaVersion >= expected;
  if (output.json) {
    output.out(JSON.stringify({ ok: upToDate, url: redactUrl(config.databaseUrl), ...status }));
  } else {
    output.out(`server     PostgreSQL ${status.serverVersion} (${redactUrl(config.databaseUrl)})`);
    output.out(
      `schema     version ${status.schemaVersion} of ${expected}${upToDate ? "" : " — out of date: run `optchat migrate`"}`,
    );
    const jobs = Object.entries(status.jobs)
      .map(([state, n]) => `${state} ${n}`)
      .join(", ");
    output.out(
      `compactor  ${status.pendingLeaves} message(s) not summarized yet; jobs: ${jobs || "none"}; failing nodes: ${status.failingNodes}; failing publications: ${status.failingPublications}`,
    );
    const width = Math.max(0, ...Object.keys(status.tables).map((name) => name.length));
    for (const [name, rows] of Object.entries(status.tables)) output.out(`  ${name.padEnd(width)}  ${rows}`);
  }
  if (!upToDate) {
    throw new OptchatError(
      "SCHEMA_OUT_OF_DATE",
      `schema version ${status.schemaVersion}, expected ${expected}: run \`optchat migrate\``,
    );
  }
  return 0;
}

/** search, sessions and scoped zoom: retrieval at a scope's latest snapshot, as a new turn in that scope sees it. */
async function scopedCommand(
  command: "zoom" | "search" | "sessions",
  args: readonly string[],
  config: Config,
  output: Output,
): Promise<number> {
  const usage = {
    zoom: "optchat zoom --scope <scope> <ref> [--json]",
    search:
      "optchat search --scope <scope> <query...> [--any] [--session ID] [--before ISO] [--after ISO] [--cursor C] [--json]",
    sessions: "optchat sessions --scope <scope> [--cursor C] [--json]",
  }[command];
  const flags = {
    scope: { type: "string" },
    session: { type: "string" },
    before: { type: "string" },
    after: { type: "string" },
    cursor: { type: "string" },
    any: { type: "boolean" },
  } as const;
  let parsed: ReturnType<
    typeof parseArgs<{
      args: string[];
      options: typeof flags & { json: { type: "boolean" } };
      allowPositionals: true;
      strict: true;
    }>
  >;
  try {
    parsed = parseArgs({
      args: [...args],
      options: { ...flags, json: { type: "boolean" } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new OptchatError("INPUT_INVALID", `${(error as Error).message}\nUsage: ${usage}`);
  }
  const { values, positionals } = parsed;
  if (!values.scope)
    throw new OptchatError("INPUT_INVALID", `--scope is required (e.g. project:<project id>)\nUsage: ${usage}`);
  const memory = await openMemory(config, { applicationName: "optchat-cli" });
  try {
    const reader = await memory.readScope(values.scope);
    let answer: unknown;
    if (command === "zoom") {
      if (positionals.length !== 1) throw new OptchatError("INPUT_INVALID", `expected one ref\nUsage: ${usage}`);
      answer = await memory.zoom(reader, positionals[0] as string, values.cursor ? { cursor: values.cursor } : {});
    } else if (command === "search") {
      if (positionals.length === 0) throw new OptchatError("INPUT_INVALID", `expected a query\nUsage: ${usage}`);
      answer = await memory.search(reader, {
        query: positionals.join(" "),
        ...(values.any ? { match: "any" as const } : {}),
        ...(values.session ? { sessionId: values.session } : {}),
        ...(values.before ? { before: values.before } : {}),
        ...(values.after ? { after: values.after } : {}),
        ...(values.cursor ? { cursor: values.cursor } : {}),
      });
    } else {
      answer = await memory.sessions(reader, values.cursor ? { cursor: values.cursor } : {});
    }
    if (output.json) output.out(JSON.stringify({ ok: true, ...(answer as object) }));
    else output.out(describeAnswer(answer as Record<string, unknown>));
    return 0;
  } finally {
    await memory.close();
  }
}

/** A retrieval answer as plain lines for a terminal. */
function describeAnswer(answer: Record<string, unknown>): string {
  const out: string[] = [];
  const snapshot = answer.snapshot as { scopeId: string; publicationHighWater: number } | undefined;
  if (Array.isArray(answer.hits)) {
    for (const hit of answer.hits as { ref: string; source: string; occurredAt: string | null; excerpt: string }[]) {
      out.push(`${hit.ref}  (${hit.source}${hit.occurredAt ? `, ${hit.occurredAt}` : ""})  ${hit.excerpt}`);
    }
    if (out.length === 0) out.push("no hits");
  } else if (Array.isArray(answer.sessions)) {
    for (const s of answer.sessions as {
      sessionId: string;
      title: string | null;
      publishedTurns: number;
      lastAt: string | null;
    }[]) {
      out.push(
        `${s.sessionId}  ${s.publishedTurns} published turn(s)${s.lastAt ? `, last ${s.lastAt}` : ""}${s.title ? `  ${s.title}` : ""}`,
      );
    }
  } else if (answer.kind === "lines") {
    for (const line of answer.lines as { ref: string; text: string }[])
      out.push(lineAsText({ ref: line.ref, text: line.text }));
  } else if (answer.kind === "publication") {
    out.push(
      `${answer.ref}: turn ${answer.turnId} of session ${answer.sessionId} (${answer.outcome}), messages ${answer.range}, completed ${answer.completedAt}`,
    );
    for (const line of answer.cover as { ref: string; text: string }[]) out.push(lineAsText(line));
  } else if (answer.kind === "message") {
    out.push(
      `${answer.ref}|${answer.recordKind} at ${answer.occurredAt}${answer.complete ? "" : ` (first part; --cursor ${answer.nextCursor} for more)`}:`,
    );
    out.push(String(answer.text));
  }
  if (typeof answer.nextCursor === "string") out.push(`more: --cursor ${answer.nextCursor}`);
  if (snapshot) out.push(`(scope ${snapshot.scopeId}, snapshot ${snapshot.publicationHighWater})`);
  return out.join("\n");
}

async function auditCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  options(args);
  const memory = await openMemory(config, { applicationName: "optchat-audit" });
  try {
    const report = await memory.audit();
    if (output.json) output.out(JSON.stringify(report));
    else {
      for (const v of report.violations) output.out(`${v.audit}: ${v.subject}: ${v.problem}`);
      output.out(
        report.ok ? `ok: every audit passed (${report.trees} trees)` : `${report.violations.length} violation(s)`,
      );
    }
    return report.ok ? 0 : 1;
  } finally {
    await memory.close();
  }
}

async function inspectCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const { positionals } = parseCommand(args, {}, 1, "optchat inspect <session> [--json]");
  const id = positionals[0] as string;
  const memory = await openMemory(config, { applicationName: "optchat-inspect" });
  try {
    // Both kinds of id start with ses_: try ours, then OpenCode's.
    const session =
      (await memory.getSession(id).catch(() => undefined)) ?? (await memory.host.findSession("opencode", id));
    if (!session) {
      throw new OptchatError(
        "SESSION_NOT_FOUND",
        `No session ${id}: give an optchat session id (from \`optchat sessions --scope …\`) or an OpenCode session id that the plugin has seen`,
        { sessionId: id },
      );
    }
    const report = await inspectStoredSession(memory, session);
    if (output.json) output.out(JSON.stringify(report));
    else output.out(JSON.stringify(report, null, 2));
    return 0;
  } finally {
    await memory.close();
  }
}
