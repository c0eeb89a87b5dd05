import type { Queryable } from "./db.js";

/** How much of these sessions' memory a forget removes: records and live publications (dry runs, progress). */
export async function countForgettable(
  db: Queryable,
  sessionIds: readonly string[],
): Promise<{ records: number; publications: number }> {
  const result = await db.query<{ records: string; publications: string }>(
    `SELECT (SELECT count(*) FROM optchat.records WHERE session_id = ANY($1::text[])) AS records,
            (SELECT count(*) FROM optchat.publications WHERE session_id = ANY($1::text[]) AND retired_at IS NULL)
              AS publications`,
    [sessionIds],
  );
  return { records: Number(result.rows[0]?.records ?? 0), publications: Number(result.rows[0]?.publications ?? 0) };
}
