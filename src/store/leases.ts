import type { Queryable } from "./db.js";

export type LeaseClaim =
  | { readonly acquired: true; readonly fence: number }
  | { readonly acquired: false; readonly holder: string; readonly expiresAt: Date };

/**
 * Claims the session's lease for `holder` for `ttlMs`: granted when the session has no lease, when the lease expired,
 * when `holder` already holds it (a renewal that keeps the fence), or when its holder is `takeOverFrom` (a holder the
 * caller proved dead). A new holder gets the next fence.
 */
export async function claimSessionLease(
  db: Queryable,
  input: { sessionId: string; holder: string; ttlMs: number; takeOverFrom?: string | undefined },
): Promise<LeaseClaim> {
  const claimed = await db.query<{ fence: number }>(
    `INSERT INTO optchat.session_leases AS l (session_id, holder, fence, expires_at)
     VALUES ($1::text, $2::text, 1, now() + $3::int * interval '1 millisecond')
     ON CONFLICT (session_id) DO UPDATE
        SET holder = excluded.holder,
            fence = CASE WHEN l.holder = excluded.holder AND l.expires_at >= now() THEN l.fence ELSE l.fence + 1 END,
            acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at >= now() THEN l.acquired_at ELSE now() END,
            renewed_at = now(),
            expires_at = excluded.expires_at
      WHERE l.holder = excluded.holder OR l.expires_at < now() OR l.holder = $4::text
     RETURNING fence`,
    [input.sessionId, input.holder, input.ttlMs, input.takeOverFrom ?? null],
  );
  const row = claimed.rows[0];
  if (row) return { acquired: true, fence: Number(row.fence) };
  const current = await db.query<{ holder: string; expires_at: Date }>(
    "SELECT holder, expires_at FROM optchat.session_leases WHERE session_id = $1::text",
    [input.sessionId],
  );
  const lease = current.rows[0];
  // The lease was released between the two statements: report it as held for no time; the caller may retry.
  return { acquired: false, holder: lease?.holder ?? "(released)", expiresAt: lease?.expires_at ?? new Date(0) };
}

/**
 * Extends a lease still held under `fence`; false when it was lost or ended (expired, released, or taken by another
 * holder). An ended lease is never revived: a renewal sent before a release can arrive after it (another connection of
 * the pool), and would otherwise hold the session against every other process for a whole TTL.
 */
export async function renewSessionLease(
  db: Queryable,
  input: { sessionId: string; holder: string; fence: number; ttlMs: number },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE optchat.session_leases
        SET renewed_at = now(), expires_at = now() + $4::int * interval '1 millisecond'
      WHERE session_id = $1::text AND holder = $2::text AND fence = $3::bigint AND expires_at >= now()`,
    [input.sessionId, input.holder, input.fence, input.ttlMs],
  );
  return (result.rowCount ?? 0) > 0;
}

/** Ends a lease by expiring it (the row and its fence stay, so fences never repeat). */
export async function releaseSessionLease(
  db: Queryable,
  input: { sessionId: string; holder: string; fence: number },
): Promise<boolean> {
  const result = await db.query(
    `UPDATE optchat.session_leases SET expires_at = now() - interval '1 millisecond'
      WHERE session_id = $1::text AND holder = $2::text AND fence = $3::bigint`,
    [input.sessionId, input.holder, input.fence],
  );
  return (result.rowCount ?? 0) > 0;
}
