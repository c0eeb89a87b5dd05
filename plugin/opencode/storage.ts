/**
 * Read access to what OpenCode 1.18.33 stored on disk: its projects, sessions, messages and parts.
 *
 * Where (verified on this machine with the harness, docs/opencode-notes.md "Where OpenCode keeps sessions"): one SQLite
 * database, `<data dir>/opencode.db` (WAL mode), the data dir being `$XDG_DATA_HOME/opencode` or
 * `~/.local/share/opencode`; `OPENCODE_DB` overrides the file (absolute, or relative to the data dir). Tables `project`
 * (id, worktree), `session` (id, project_id, parent_id, directory, title, time_*), `message` and `part` (id,
 * session_id / message_id, time_created, and `data`: the message info or part as JSON without its ids). The JSON
 * files of older releases (`storage/`) are migrated into the database by OpenCode itself when it starts.
 *
 * The database is read through OpenCode's own `opencode db --format json <query>` (Node 20 has no SQLite module, and
 * no SQLite library is a dependency): OpenCode opens it the way it always does (WAL, busy timeout), so reading while
 * OpenCode runs is safe. `--pure` keeps the user's plugins (optchat among them) from loading in that process.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { stripVTControlCharacters } from "node:util";
import { OptchatError } from "../../src/memory/index.js";
import type { HostMessage, HostMessageInfo, HostPart } from "./messages.js";

/** This checkout's pinned OpenCode (the dev dependency), the version whose storage this module was verified on. */
const PINNED_BIN = fileURLToPath(new URL("../../node_modules/opencode-ai/bin/opencode.exe", import.meta.url));

/** Part bytes read per query: sessions are read in batches so that no answer holds the whole history at once. */
const BATCH_PART_BYTES = 32 * 1024 * 1024;
const BATCH_SESSIONS = 200;

export interface OpencodeStorageOptions {
  /** OpenCode's data directory (holding opencode.db); default `$XDG_DATA_HOME/opencode` or ~/.local/share/opencode. */
  readonly dataDir?: string;
  /** The environment to resolve defaults from and to run OpenCode with (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** The `opencode` executable; default this checkout's node_modules/.bin/opencode, else `opencode` on PATH. */
  readonly bin?: string;
}

export interface StoredSession {
  readonly id: string;
  readonly projectId: string;
  readonly parentId: string | null;
  readonly directory: string;
  readonly title: string;
  /** The project's worktree: the repository root, or "/" for OpenCode's "global" project (directories outside git). */
  readonly worktree: string;
  readonly createdAt: number;
  readonly updatedAt: number;
  readonly messages: number;
  /** Bytes of the session's stored parts (JSON), to size the read batches. */
  readonly partBytes: number;
}

/** A directory OpenCode ran sessions in, with the project OpenCode filed it under. */
export interface StoredDirectory {
  readonly projectId: string;
  readonly worktree: string;
  readonly directory: string;
  readonly sessions: number;
}

export interface OpencodeStorage {
  /** The database file read. */
  readonly databasePath: string;
  /** Every (project, directory) that has sessions. */
  directories(): Promise<StoredDirectory[]>;
  /** Every session, parents before their subagent sessions, oldest first. */
  sessions(): Promise<StoredSession[]>;
  /** The sessions' messages (oldest first) with their parts (in id order), as the plugin's hooks deliver them. */
  readMessages(sessions: readonly StoredSession[]): AsyncGenerator<{ session: StoredSession; messages: HostMessage[] }>;
}

/** Where OpenCode 1.18.33 keeps its database, from the options and the environment. */
export function opencodeDatabasePath(options: OpencodeStorageOptions = {}): { dataDir: string; databasePath: string } {
  const env = options.env ?? process.env;
  const dataDir = resolve(
    options.dataDir ?? join(env.XDG_DATA_HOME || join(env.HOME || homedir(), ".local", "share"), "opencode"),
  );
  const override = options.dataDir === undefined ? env.OPENCODE_DB : undefined;
  const databasePath = override
    ? isAbsolute(override)
      ? override
      : join(dataDir, override)
    : join(dataDir, "opencode.db");
  return { dataDir, databasePath };
}

/**
 * Opens OpenCode's storage for reading. Fails with INPUT_INVALID naming --data-dir when there is no database there:
 * running `opencode db` on a missing file would create an empty one.
 */
export function openOpencodeStorage(options: OpencodeStorageOptions = {}): OpencodeStorage {
  const { dataDir, databasePath } = opencodeDatabasePath(options);
  if (!existsSync(databasePath)) {
    const older = existsSync(join(dataDir, "storage"))
      ? ` (${join(dataDir, "storage")} holds an older OpenCode's JSON files: start OpenCode 1.18.33 once, which moves them into opencode.db)`
      : "";
    throw new OptchatError(
      "INPUT_INVALID",
      `No OpenCode database at ${databasePath}${older}: pass --data-dir with OpenCode's data directory (the one holding opencode.db; default ~/.local/share/opencode)`,
      { field: "data-dir" },
    );
  }
  const env = options.env ?? process.env;
  const bin = options.bin ?? (existsSync(PINNED_BIN) ? PINNED_BIN : "opencode");
  const query = <T>(sql: string) => runQuery<T>(bin, databasePath, env, sql);

  return {
    databasePath,
    async directories() {
      const rows = await query<{ project_id: string; worktree: string; directory: string; sessions: number }>(
        `SELECT s.project_id, COALESCE(p.worktree, '/') AS worktree, s.directory, count(*) AS sessions
           FROM session s LEFT JOIN project p ON p.id = s.project_id
          GROUP BY s.project_id, p.worktree, s.directory ORDER BY s.project_id, s.directory`,
      );
      return rows.map((row) => ({
        projectId: row.project_id,
        worktree: row.worktree,
        directory: row.directory,
        sessions: row.sessions,
      }));
    },
    async sessions() {
      const rows = await query<SessionRow>(
        `SELECT s.id, s.project_id, s.parent_id, s.directory, s.title, s.time_created, s.time_updated,
                COALESCE(p.worktree, '/') AS worktree,
                (SELECT count(*) FROM message m WHERE m.session_id = s.id) AS messages,
                (SELECT COALESCE(sum(length(pt.data)), 0) FROM part pt WHERE pt.session_id = s.id) AS part_bytes
           FROM session s LEFT JOIN project p ON p.id = s.project_id
          ORDER BY s.time_created, s.id`,
      );
      return parentsFirst(rows.map(toStoredSession));
    },
    async *readMessages(sessions) {
      for (const batch of batches(sessions)) {
        const ids = batch.map((s) => sqlString(s.id)).join(", ");
        const rows = await query<ItemRow>(
          `SELECT 'm' AS item, m.session_id, m.id, NULL AS message_id, m.time_created, m.data
             FROM message m WHERE m.session_id IN (${ids})
           UNION ALL
           SELECT 'p', pt.session_id, pt.id, pt.message_id, pt.time_created, pt.data
             FROM part pt WHERE pt.session_id IN (${ids})`,
        );
        const bySession = assemble(rows);
        for (const session of batch) yield { session, messages: bySession.get(session.id) ?? [] };
      }
    },
  };
}

interface SessionRow {
  id: string;
  project_id: string;
  parent_id: string | null;
  directory: string;
  title: string;
  time_created: number;
  time_updated: number;
  worktree: string;
  messages: number;
  part_bytes: number;
}

interface ItemRow {
  item: "m" | "p";
  session_id: string;
  id: string;
  message_id: string | null;
  time_created: number;
  data: string;
}

function toStoredSession(row: SessionRow): StoredSession {
  return {
    id: row.id,
    projectId: row.project_id,
    parentId: row.parent_id,
    directory: row.directory,
    title: row.title,
    worktree: row.worktree,
    createdAt: row.time_created,
    updatedAt: row.time_updated,
    messages: row.messages,
    partBytes: row.part_bytes,
  };
}

/** Parents before their subagents (a child is registered with its parent's optchat session), else oldest first. */
function parentsFirst(sessions: StoredSession[]): StoredSession[] {
  const byId = new Map(sessions.map((s) => [s.id, s]));
  const out: StoredSession[] = [];
  const placed = new Set<string>();
  const place = (session: StoredSession, path: Set<string>) => {
    if (placed.has(session.id) || path.has(session.id)) return;
    path.add(session.id);
    const parent = session.parentId ? byId.get(session.parentId) : undefined;
    if (parent) place(parent, path);
    placed.add(session.id);
    out.push(session);
  };
  for (const session of sessions) place(session, new Set());
  return out;
}

function* batches(sessions: readonly StoredSession[]): Generator<StoredSession[]> {
  let batch: StoredSession[] = [];
  let bytes = 0;
  for (const session of sessions) {
    if (batch.length > 0 && (bytes + session.partBytes > BATCH_PART_BYTES || batch.length >= BATCH_SESSIONS)) {
      yield batch;
      batch = [];
      bytes = 0;
    }
    batch.push(session);
    bytes += session.partBytes;
  }
  if (batch.length > 0) yield batch;
}

/**
 * Messages with their parts, shaped as the runtime's events carry them: the stored `data` plus the ids that live in
 * columns. Messages in creation order (then id: `msg_` ids ascend over time), parts in id order, as OpenCode sorts them.
 */
function assemble(rows: readonly ItemRow[]): Map<string, HostMessage[]> {
  const messages = new Map<string, { created: number; message: HostMessage }>();
  const parts: ItemRow[] = [];
  for (const row of rows) {
    if (row.item === "p") {
      parts.push(row);
      continue;
    }
    const info = { ...(JSON.parse(row.data) as object), id: row.id, sessionID: row.session_id } as HostMessageInfo;
    messages.set(row.id, { created: row.time_created, message: { info, parts: [] } });
  }
  parts.sort((a, b) => compare(a.id, b.id));
  for (const row of parts) {
    const owner = row.message_id ? messages.get(row.message_id) : undefined;
    if (!owner) continue; // a part whose message is gone (never seen; OpenCode deletes them together)
    owner.message.parts.push({
      ...(JSON.parse(row.data) as object),
      id: row.id,
      messageID: row.message_id,
      sessionID: row.session_id,
    } as HostPart);
  }
  const bySession = new Map<string, HostMessage[]>();
  const ordered = [...messages.values()].sort(
    (a, b) => a.created - b.created || compare(a.message.info.id, b.message.info.id),
  );
  for (const { message } of ordered) {
    const list = bySession.get(message.info.sessionID) ?? [];
    list.push(message);
    bySession.set(message.info.sessionID, list);
  }
  return bySession;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sqlString(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}

/** One `opencode db --format json` query; its JSON array of rows. */
async function runQuery<T>(bin: string, databasePath: string, env: NodeJS.ProcessEnv, sql: string): Promise<T[]> {
  const child = spawn(bin, ["db", "--pure", "--format", "json", sql], {
    env: {
      ...env,
      OPENCODE_DB: databasePath,
      // Nothing to fetch for a query (docs/opencode-notes.md "Start-up without registry access").
      OPENCODE_DISABLE_MODELS_FETCH: "1",
      OPENCODE_DISABLE_AUTOUPDATE: "1",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdout: Buffer[] = [];
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const code = await new Promise<number | null>((done, fail) => {
    child.once("error", (error: NodeJS.ErrnoException) =>
      fail(
        new OptchatError(
          "INPUT_INVALID",
          `cannot run ${bin} (${error.code ?? error.message}) to read OpenCode's database: run \`npm install\` in this checkout (it installs opencode-ai 1.18.33), or put opencode on PATH`,
        ),
      ),
    );
    child.once("close", done);
  });
  if (code !== 0) {
    // OpenCode prints "Error: Unexpected error" and then the SQLite message, with terminal colour codes.
    const reason = stripVTControlCharacters(stderr).trim().split("\n").filter(Boolean).slice(-1)[0] ?? `exit ${code}`;
    throw new Error(`reading OpenCode's database ${databasePath} failed: ${reason}`);
  }
  const text = Buffer.concat(stdout).toString("utf8").trim();
  return text === "" ? [] : (JSON.parse(text) as T[]);
}
