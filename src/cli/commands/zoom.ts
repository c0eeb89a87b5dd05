import { OptchatError } from "../../core/errors.js";
import { resolveSession } from "../../memory/resolve-session.js";
import type { Memory, PayloadPage } from "../../memory/service.js";
import { lineAsText } from "../../memory/views.js";
import { type Command, type CommandContext, parseCommand, withMemory } from "../command.js";
import { readScopeOrHere } from "../here.js";
import { renderRecord, renderZoom } from "../render.js";

const sessionUsage = "optchat zoom <session> <start+count> [--json]";
const scopeUsage = "optchat zoom [--scope <scope>] <ref> [--cursor C] [--json]";

export const zoomCommand: Command = {
  name: "zoom",
  usage: [sessionUsage, scopeUsage],
  summary:
    "open a line of a session's tree (start+1 prints the whole message), or a ref of this directory's project\n" +
    "(or --scope S: pub:0+1, <session>:<generation>:0+4) at its latest snapshot, as a new turn would see it",
  async run(args, ctx) {
    const flags = { scope: { type: "string" }, cursor: { type: "string" } } as const;
    const { values, positionals } = parseCommand(args, flags, "any", `${sessionUsage}\n       ${scopeUsage}`);
    if (values.scope !== undefined || positionals.length === 1) {
      return await zoomScope(values.scope, positionals, values.cursor, ctx);
    }
    if (values.cursor !== undefined) {
      throw new OptchatError("INPUT_INVALID", `--cursor needs --scope\nUsage: ${scopeUsage}`);
    }
    if (positionals.length !== 2) {
      throw new OptchatError(
        "INPUT_INVALID",
        `expected 2 argument(s), got ${positionals.length}\nUsage: ${sessionUsage}`,
      );
    }
    return await zoomSession(positionals[0] as string, positionals[1] as string, ctx);
  },
};

async function zoomScope(
  scope: string | undefined,
  positionals: readonly string[],
  cursor: string | undefined,
  { config, output, cwd }: CommandContext,
): Promise<number> {
  if (positionals.length !== 1) throw new OptchatError("INPUT_INVALID", `expected one ref\nUsage: ${scopeUsage}`);
  const answer = await withMemory(config, "optchat-cli", async (memory) =>
    memory.zoom(await readScopeOrHere(memory, scope, cwd), positionals[0] as string, cursor ? { cursor } : {}),
  );
  output.out(output.json ? JSON.stringify({ ok: true, ...answer }) : renderZoom(answer));
  return 0;
}

async function zoomSession(id: string, ref: string, { config, output }: CommandContext): Promise<number> {
  return await withMemory(config, "optchat-cli", async (memory) => {
    const { sessionId } = await resolveSession(memory, id);
    const result = await memory.zoomSession(sessionId, ref);
    if (result.kind === "children") {
      if (output.json) output.out(JSON.stringify({ ok: true, ...result }));
      else for (const line of result.lines) output.out(lineAsText(line));
      return 0;
    }
    const message = await readWholeMessage(memory, sessionId, result.seq, ref);
    if (output.json) {
      const { record, text, validUtf8 } = message;
      output.out(
        JSON.stringify({
          ok: true,
          ref: result.ref,
          kind: record.kind,
          occurredAt: record.occurredAt,
          toolName: record.toolName,
          validUtf8,
          hostTruncated: record.hostTruncated,
          text,
        }),
      );
    } else {
      const { record, text } = message;
      output.out(
        renderRecord({
          ref: result.ref,
          kind: record.kind,
          toolName: record.toolName,
          occurredAt: record.occurredAt,
          text,
        }),
      );
    }
    return 0;
  });
}

/** A message's record and its whole payload as text, read page by page (1 MiB each). */
async function readWholeMessage(memory: Memory, sessionId: string, seq: number, ref: string) {
  const session = await memory.getSession(sessionId);
  const [record] = await memory.listRecords(sessionId, { fromSeq: seq, limit: 1 });
  if (!record) throw new OptchatError("REF_NOT_FOUND", `No message ${ref}`);
  const pages: string[] = [];
  let cursor: string | undefined;
  let page: PayloadPage;
  do {
    page = await memory.readPayload(
      { sessionId, generation: session.currentGeneration, seq },
      { maxBytes: 1 << 20, ...(cursor ? { cursor } : {}) },
    );
    pages.push(page.text);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return { record, text: pages.join(""), validUtf8: page.validUtf8 };
}
