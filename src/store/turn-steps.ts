/**
 * A turn's tool steps as the execution checkpoints and a stopped turn's hand-on read them (issue 36): the seq of each
 * tool result (the ref a checkpoint line points at), and the calls, results and notes of a turn with the start of
 * their text. Every read is one indexed query over the turn's records.
 */
import type { Queryable } from "./db.js";

/**
 * The seq of every tool result of a turn, by the tool call id it answers; only those above `afterSeq` when given (a
 * caller that keeps what it read reads only what came since, so a long turn's read does not grow with it).
 */
export async function turnToolResultSeqs(
  db: Queryable,
  sessionId: string,
  generation: number,
  turnId: string,
  afterSeq = -1,
): Promise<Map<string, number>> {
  const result = await db.query<{ tool_call_id: string; seq: string }>(
    `SELECT tool_call_id, max(seq) AS seq FROM optchat.records
      WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text AND kind = 'tool_result'
        AND seq > $4::bigint
      GROUP BY 1`,
    [sessionId, generation, turnId, afterSeq],
  );
  return new Map(result.rows.map((row) => [row.tool_call_id, Number(row.seq)]));
}

export interface TurnStepRow {
  readonly seq: number;
  readonly kind: "user" | "assistant" | "tool_call" | "tool_result" | "report" | "note";
  readonly toolCallId: string | null;
  readonly toolName: string | null;
  /** The first `headBytes` bytes of the record's text (UTF-8, a cut character dropped). */
  readonly head: string;
  readonly byteLength: number;
  /** The last `tailBytes` bytes of a longer record's text (empty when the head holds it all). */
  readonly tail: string;
}

/**
 * A turn's records in order, each with the start of its text; the last `limit` when the turn has more (`total` counts
 * them all).
 */
export async function turnStepRows(
  db: Queryable,
  where: { sessionId: string; generation: number; turnId: string },
  headBytes: number,
  limit: number,
  tailBytes = 0,
): Promise<{ rows: TurnStepRow[]; total: number }> {
  const result = await db.query<{
    total: string;
    seq: string;
    kind: TurnStepRow["kind"];
    tool_call_id: string | null;
    tool_name: string | null;
    head: Buffer;
    tail: Buffer;
    byte_length: string;
  }>(
    `SELECT * FROM (
       SELECT count(*) OVER () AS total, r.seq, r.kind, r.tool_call_id, r.tool_name, substring(b.content FROM 1 FOR $4::int) AS head,
              CASE WHEN b.byte_length > $4::int
                   THEN substring(b.content FROM greatest($4::int + 1, (b.byte_length - $6::int + 1)::int)) ELSE ''::bytea END AS tail,
              b.byte_length
         FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
        WHERE r.session_id = $1::text AND r.generation = $2::int AND r.turn_id = $3::text
        ORDER BY r.seq DESC LIMIT $5::int) last ORDER BY seq`,
    [where.sessionId, where.generation, where.turnId, headBytes, limit, tailBytes],
  );
  const rows = result.rows.map((row) => ({
    seq: Number(row.seq),
    kind: row.kind,
    toolCallId: row.tool_call_id,
    toolName: row.tool_name,
    head: row.head.toString("utf8").replace(/\uFFFD$/, ""),
    tail: row.tail.toString("utf8").replace(/^\uFFFD/, ""),
    byteLength: Number(row.byte_length),
  }));
  return { rows, total: Number(result.rows[0]?.total ?? 0) };
}
