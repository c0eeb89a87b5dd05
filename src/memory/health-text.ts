/**
 * The compactor's verdict and health as text lines, verdict first: `optchat status`, `optchat inspect`, `optchat
 * doctor` and memory_inspect print the same words. Labels are padded to LABEL_WIDTH.
 */
import type { Verdict } from "../core/health.js";
import type { CompactorHealth } from "./health.js";

export const LABEL_WIDTH = 11;

export function labelled(label: string, text: string): string {
  return `${label.padEnd(LABEL_WIDTH - 1)} ${text}`;
}

/** `verdict  <summary>`, then one `why`/`fix` pair per reason and the notes. */
export function verdictLines(verdict: Verdict, label = "verdict"): string[] {
  const lines = [labelled(label, verdict.summary)];
  if (verdict.reasons.length > 1) for (const reason of verdict.reasons) lines.push(labelled("  why", reason.text));
  for (const reason of verdict.reasons) lines.push(labelled("  fix", reason.fix));
  for (const note of verdict.notes) lines.push(labelled("  note", note));
  return lines;
}

const ago = (seconds: number) => `${seconds} s ago`;

/** Workers (alive first), the oldest waiting job and the last turn's publication lag. */
export function compactorLines(health: CompactorHealth): string[] {
  const lines: string[] = [];
  const alive = health.workers.filter((w) => w.alive);
  const gone = health.workers.filter((w) => !w.alive);
  if (health.workers.length === 0) lines.push(labelled("workers", "none has run on this database in the last day"));
  else
    lines.push(
      labelled("workers", `${alive.length} alive${gone.length > 0 ? `, ${gone.length} gone in the last day` : ""}`),
    );
  for (const w of [...alive, ...gone.slice(0, 3)]) {
    const state = w.alive
      ? `${w.paused ? "alive, paused" : "alive"}, beat ${ago(w.beatAgeSeconds)}`
      : w.stoppedAt
        ? `stopped ${ago(w.beatAgeSeconds)}`
        : `gone: no beat for ${w.beatAgeSeconds} s`;
    const jobs = `${w.jobsFinished} job(s) done${w.lastJobAt ? `, last at ${w.lastJobAt.toISOString()}` : ""}`;
    const error = w.lastError ? `; last error: ${oneLine(w.lastError)}` : "";
    lines.push(
      `  - ${w.runsIn} pid ${w.pid} on ${w.hostName} (${w.summarizer}): ${state}; started ${w.startedAt.toISOString()}; ${jobs}${error}`,
    );
  }
  lines.push(
    labelled(
      "waiting",
      health.waitingJobs === 0
        ? "no job waits for a worker"
        : `${health.waitingJobs} job(s) wait for a worker, the oldest since ${health.oldestWaitingSince} (${health.oldestWaitingSeconds} s)`,
    ),
  );
  const last = health.lastTurn;
  lines.push(
    labelled(
      "published",
      !last
        ? "no turn finished yet"
        : last.publishedAt
          ? `the last turn (${last.sessionId} ${last.turnId}, finished ${last.finishedAt.toISOString()}) was published ${last.lagSeconds} s after it ended`
          : `the last turn (${last.sessionId} ${last.turnId}, finished ${last.finishedAt.toISOString()}) is not published yet: ${last.lagSeconds} s since it ended`,
    ),
  );
  return lines;
}

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat;
}
