/**
 * Rows written per table, for the write-amplification figures of `bench ingest` (issue 9 item 6): every table of the
 * optchat schema and pg-boss's job table (the sum of its partitions), from PostgreSQL's cumulative statistics of the
 * scratch database, which only the bench writes to.
 *
 * Statistics are flushed by each backend lazily (PostgreSQL 15: at most once a second while busy, up to 10 s after it
 * goes idle), so a reading taken right after a run would miss most of it. `flushPoolStatistics` asks every pooled
 * connection to flush at its next idle moment (pg_stat_force_next_flush), which it reaches as soon as the statement
 * ends; `readTableWrites` then waits until two consecutive readings agree.
 */
import type pg from "pg";
import { round } from "./common.js";

export interface TableWrites {
  readonly inserted: number;
  readonly updated: number;
  readonly deleted: number;
  /** pg_total_relation_size: heap, TOAST and indexes. */
  readonly bytes: number;
  /** Live rows as the statistics count them (approximate while autovacuum has not run). */
  readonly liveRows: number;
}

export type TableWritesByName = ReadonlyMap<string, TableWrites>;

/** Every idle and busy connection of the pool flushes its pending table statistics when its next statement ends. */
export async function flushPoolStatistics(pool: pg.Pool, connections: number): Promise<void> {
  const clients: pg.PoolClient[] = [];
  try {
    // Checking out `connections` clients at once reaches every pooled backend (the pool hands out idle ones first).
    for (let i = 0; i < connections; i++) clients.push(await pool.connect());
    await Promise.all(clients.map((client) => client.query("SELECT pg_stat_force_next_flush()")));
  } finally {
    for (const client of clients) client.release();
  }
}

async function readOnce(pool: pg.Pool): Promise<Map<string, TableWrites>> {
  const client = await pool.connect();
  try {
    await client.query("SELECT pg_stat_clear_snapshot()");
    const result = await client.query<{
      name: string;
      inserted: string;
      updated: string;
      deleted: string;
      bytes: string;
      live_rows: string;
    }>(
      `WITH tables AS (
         SELECT s.relid, CASE WHEN s.schemaname = 'pgboss' THEN 'pgboss.job' ELSE s.relname END AS name, s.n_tup_ins,
                s.n_tup_upd, s.n_tup_del, s.n_live_tup
           FROM pg_stat_user_tables s
          WHERE s.schemaname = 'optchat'
             OR (s.schemaname = 'pgboss' AND s.relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgboss.job'::regclass))
       )
       SELECT name, sum(n_tup_ins)::text AS inserted, sum(n_tup_upd)::text AS updated, sum(n_tup_del)::text AS deleted,
              sum(pg_total_relation_size(relid))::text AS bytes, sum(n_live_tup)::text AS live_rows
         FROM tables GROUP BY name ORDER BY name`,
    );
    return new Map(
      result.rows.map((row) => [
        row.name,
        {
          inserted: Number(row.inserted),
          updated: Number(row.updated),
          deleted: Number(row.deleted),
          bytes: Number(row.bytes),
          liveRows: Number(row.live_rows),
        },
      ]),
    );
  } finally {
    client.release();
  }
}

function same(a: TableWritesByName, b: TableWritesByName): boolean {
  if (a.size !== b.size) return false;
  for (const [name, x] of a) {
    const y = b.get(name);
    if (!y || x.inserted !== y.inserted || x.updated !== y.updated || x.deleted !== y.deleted) return false;
  }
  return true;
}

/** The counters once they stop moving (flush first), at most `timeoutMs` later. */
export async function readTableWrites(
  pool: pg.Pool,
  connections: number,
  timeoutMs = 15_000,
): Promise<TableWritesByName> {
  await flushPoolStatistics(pool, connections);
  const deadline = Date.now() + timeoutMs;
  let previous = await readOnce(pool);
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const current = await readOnce(pool);
    if (same(previous, current) || Date.now() > deadline) return current;
    previous = current;
  }
}

export interface WritesPerRecord {
  /** Rows inserted + updated + deleted per sealed record, per table (tables with no writes left out). */
  readonly rowsWrittenPerRecord: Record<string, number>;
  /** The same split by operation, per table. */
  readonly rowOpsPerRecord: Record<string, { ins: number; upd: number; del: number }>;
  /** Total rows written per record over all the tables above. */
  readonly rowsWrittenPerRecordTotal: number;
  /** Growth of pg_total_relation_size per record, per table (8 KiB page granularity: meaningful over many records). */
  readonly bytesPerRecord: Record<string, number>;
  readonly bytesPerRecordTotal: number;
}

export function writesPerRecord(before: TableWritesByName, after: TableWritesByName, records: number): WritesPerRecord {
  const rows: Record<string, number> = {};
  const ops: Record<string, { ins: number; upd: number; del: number }> = {};
  const bytes: Record<string, number> = {};
  let totalRows = 0;
  let totalBytes = 0;
  const per = (value: number) => (records > 0 ? round(value / records, 3) : 0);
  for (const [name, end] of after) {
    const start = before.get(name) ?? { inserted: 0, updated: 0, deleted: 0, bytes: 0, liveRows: 0 };
    const ins = end.inserted - start.inserted;
    const upd = end.updated - start.updated;
    const del = end.deleted - start.deleted;
    const grown = end.bytes - start.bytes;
    if (ins + upd + del > 0) {
      rows[name] = per(ins + upd + del);
      ops[name] = { ins: per(ins), upd: per(upd), del: per(del) };
      totalRows += ins + upd + del;
    }
    if (grown !== 0) {
      bytes[name] = records > 0 ? round(grown / records, 0) : 0;
      totalBytes += grown;
    }
  }
  return {
    rowsWrittenPerRecord: rows,
    rowOpsPerRecord: ops,
    rowsWrittenPerRecordTotal: per(totalRows),
    bytesPerRecord: bytes,
    bytesPerRecordTotal: records > 0 ? round(totalBytes / records, 0) : 0,
  };
}
