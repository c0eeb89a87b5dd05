/**
 * `optchat inspect` and memory_inspect as text, the verdict first: the session's, then the compactor's over the whole
 * database, then what they rest on. `--json` (the CLI) prints the report itself.
 */
import type { SessionHealth } from "../store/status.js";
import type { TodaySpend } from "./cost.js";
import type { CompactorHealth } from "./health.js";
import { compactorLines, labelled, verdictLines } from "./health-text.js";

interface InspectReport {
  readonly verdict: string;
  readonly compactor: CompactorHealth;
  readonly compactorToday?: TodaySpend;
  /** This session's own compactor spend today (issue 39). */
  readonly compactorThisSessionToday?: string;
  readonly session: { id: string; host: string; hostSessionId: string; scope: string; generation: number };
  readonly health: SessionHealth & { pendingLeaves: number };
  readonly lastInjection: { at: string; status: string; turn: string; error?: string | null } | null;
  readonly recentProblems: readonly { at: string; operation: string; code: string; message: string }[];
}

const iso = (value: Date | string | null | undefined) =>
  value ? (value instanceof Date ? value.toISOString() : value) : "never";

/** Extra sections first: memory_inspect adds the process it runs in and its settings (`extra`). */
export function inspectText(raw: Record<string, unknown>, extra: readonly string[] = []): string {
  const report = raw as unknown as InspectReport;
  const h = report.health;
  const head = [labelled("verdict", report.verdict), ...verdictLines(report.compactor.verdict, "compactor")];
  const lines = [
    labelled(
      "session",
      `${report.session.id} (${report.session.host} session ${report.session.hostSessionId}), scope ${report.session.scope}, generation ${report.session.generation}`,
    ),
    labelled(
      "records",
      `${h.records} stored, last sealed ${iso(h.lastSealedAt)}; ${h.builtLeaves} of ${h.leaves} summarized (${h.pendingLeaves} pending); ${h.failingNodes} failing summaries${h.lastNodeError ? `, last error: ${h.lastNodeError}` : ""}`,
    ),
    labelled(
      "turns",
      `${h.turns.completed} completed, ${h.turns.active} active, ${h.turns.interrupted} interrupted, ${h.turns.failed} failed${h.lastTurn ? `; last ${h.lastTurn.turnId} (${h.lastTurn.state}) admitted ${iso(h.lastTurn.admittedAt)}, finished ${iso(h.lastTurn.finishedAt)}` : ""}`,
    ),
    labelled(
      "published",
      `${h.publications} publication(s)${h.lastPublication ? `, last #${h.lastPublication.seq} (${h.lastPublication.outcome}) at ${iso(h.lastPublication.publishedAt)}` : ""}; ${h.unpublishedTurns} finished turn(s) not published; ${h.failingPublications} failing${h.lastPublicationError ? `, last error: ${h.lastPublicationError}` : ""}`,
    ),
    labelled(
      "lease",
      h.lease
        ? `${h.lease.holder}, fence ${h.lease.fence}, ${h.lease.live ? "live" : "expired"} (expires ${iso(h.lease.expiresAt)})`
        : "none",
    ),
    labelled("queue", `${h.queuedJobs.node} node and ${h.queuedJobs.publish} publication job(s) open (every session)`),
    ...compactorLines(report.compactor).filter((line) => !line.startsWith("published")),
    labelled(
      "injection",
      report.lastInjection
        ? `last at ${report.lastInjection.at}: ${report.lastInjection.status} (turn ${report.lastInjection.turn})${report.lastInjection.error ? `: ${report.lastInjection.error}` : ""}`
        : "none recorded",
    ),
  ];
  for (const p of report.recentProblems)
    lines.push(labelled("problem", `${p.at} ${p.operation} ${p.code}: ${p.message}`));
  const today = report.compactorToday;
  if (today) {
    lines.push(
      labelled(
        "spend",
        `today (${today.day} UTC): ${today.all.calls} compactor call(s), ${today.all.tokens} tokens, $${today.all.costUsd.toFixed(4)}${today.caps.dailyUsd > 0 ? ` of $${today.caps.dailyUsd} a day` : ", no money cap"}`,
      ),
    );
    if (today.notice) lines.push(labelled("", today.notice));
  }
  if (report.compactorThisSessionToday)
    lines.push(labelled("", `this session today: ${report.compactorThisSessionToday}`));
  return [...head, ...extra, ...lines].join("\n");
}
