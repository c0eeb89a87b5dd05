import type { Queryable } from "./db.js";
import type { ScopeKind } from "./sessions.js";

export interface ScopeSummary {
  readonly scopeId: string;
  readonly kind: ScopeKind;
  readonly createdAt: Date;
  readonly sessions: number;
  /** Sessions per host (`opencode`, `import`, …). */
  readonly hosts: Readonly<Record<string, number>>;
  /** The project ids its sessions were opened with (one for a project scope, several for a profile). */
  readonly projectIds: readonly string[];
  readonly publications: number;
  /** The host's time of its latest message (an imported one's own time, not the import's); null when none. */
  readonly lastTurnAt: Date | null;
}

interface ScopeSummaryRow {
  scope_id: string;
  kind: ScopeKind;
  created_at: Date;
  sessions: string;
  hosts: Record<string, number> | null;
  project_ids: string[];
  publications: string;
  last_turn_at: Date | null;
}

/** Every scope with its sessions and publications, latest activity first; isolated ones only when asked. */
export async function listScopeSummaries(
  db: Queryable,
  options: { includeIsolated: boolean },
): Promise<ScopeSummary[]> {
  const result = await db.query<ScopeSummaryRow>(
    `SELECT s.scope_id, s.kind, s.created_at,
            (SELECT count(*) FROM optchat.sessions se WHERE se.scope_id = s.scope_id AND se.deleted_at IS NULL) AS sessions,
            (SELECT jsonb_object_agg(h.host, h.n)
               FROM (SELECT se.host, count(*) AS n FROM optchat.sessions se
                      WHERE se.scope_id = s.scope_id AND se.deleted_at IS NULL GROUP BY se.host) h) AS hosts,
            ARRAY(SELECT DISTINCT se.project_id FROM optchat.sessions se
                   WHERE se.scope_id = s.scope_id AND se.project_id IS NOT NULL ORDER BY 1) AS project_ids,
            (SELECT count(*) FROM optchat.publications p WHERE p.scope_id = s.scope_id) AS publications,
            -- The host's time of each session's last message (one primary-key lookup per session), not when a
            -- turn was admitted here: an import admits every turn at import time (issue 40 item 6).
            (SELECT max((SELECT r.occurred_at FROM optchat.records r
                          WHERE r.session_id = se.session_id AND r.generation = se.current_generation
                          ORDER BY r.seq DESC LIMIT 1))
               FROM optchat.sessions se
              WHERE se.scope_id = s.scope_id AND se.deleted_at IS NULL) AS last_turn_at
       FROM optchat.scopes s
      WHERE $1::boolean OR s.kind <> 'isolated'
      ORDER BY last_turn_at DESC NULLS LAST, s.scope_id`,
    [options.includeIsolated],
  );
  return result.rows.map((row) => ({
    scopeId: row.scope_id,
    kind: row.kind,
    createdAt: row.created_at,
    sessions: Number(row.sessions),
    hosts: row.hosts ?? {},
    projectIds: row.project_ids,
    publications: Number(row.publications),
    lastTurnAt: row.last_turn_at,
  }));
}
