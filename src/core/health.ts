/**
 * The compactor's verdict (issue 37 item 3): working, stalled (and why), or not set up (and what is missing), decided
 * from facts the store read. Pure: ages come in as seconds measured by the database's clock, so one clock judges jobs
 * and heartbeats. `optchat status`, `optchat inspect`, `optchat doctor` and memory_inspect all say it the same way.
 */

/** A worker whose last heartbeat is at most this old counts as alive (it beats every 5 s: six beats may be missed). */
export const WORKER_ALIVE_SECONDS = 30;

/** A job that could run and has waited this long for a worker means the compactor is stalled, not just busy. */
export const STALLED_AFTER_SECONDS = 60;

export type VerdictState = "working" | "stalled" | "not set up";

export type VerdictCause =
  | "unreachable"
  | "no-database"
  | "schema"
  | "model-failing"
  | "no-worker"
  | "workers-paused"
  | "backlog";

export interface VerdictReason {
  readonly cause: VerdictCause;
  /** What is wrong, with the numbers. */
  readonly text: string;
  /** What to do, one line; never a setting that is already in effect. */
  readonly fix: string;
}

export interface Verdict {
  readonly state: VerdictState;
  /** One line: the state and what it rests on, e.g. "working: 1 worker alive, nothing waits". */
  readonly summary: string;
  /** Why it is stalled or not set up (empty when working). */
  readonly reasons: readonly VerdictReason[];
  /** Worth knowing without changing the state (jobs waiting briefly, a spent budget). */
  readonly notes: readonly string[];
}

/** What is missing before anything else can be judged. */
export type SetupProblem =
  | { readonly kind: "unreachable"; readonly where: string; readonly reason: string }
  | { readonly kind: "no-database"; readonly database: string }
  | { readonly kind: "schema"; readonly version: number; readonly expected: number };

export interface WorkerFact {
  readonly runsIn: string;
  readonly hostName: string;
  readonly pid: number;
  readonly beatAgeSeconds: number;
  readonly stopped: boolean;
  readonly paused: boolean;
  readonly lastError?: string | null;
}

export interface HealthFacts {
  readonly workers: readonly WorkerFact[];
  /** Jobs that could run now and wait for a worker. */
  readonly waitingJobs: number;
  readonly oldestWaitingSeconds: number;
  /** ISO time the oldest waiting job could start. */
  readonly oldestWaitingSince: string | null;
  readonly failingNodes: number;
  readonly failingPublications: number;
  readonly lastError: string | null;
  readonly lastFailureSecondsAgo: number | null;
  /** Age of the newest model call that succeeded (null: none recorded). */
  readonly lastOkCallSecondsAgo: number | null;
  /** What the asker knows of the plugin's embedded worker ("off" changes the advice); undefined: not known here. */
  readonly embeddedWorker?: "on" | "off";
  /** Set when a daily budget cap is reached: the setting's name. */
  readonly budgetCapReached?: string | null;
}

export function isAlive(worker: WorkerFact): boolean {
  return !worker.stopped && worker.beatAgeSeconds <= WORKER_ALIVE_SECONDS;
}

export function setupVerdict(problem: SetupProblem): Verdict {
  const reason: VerdictReason =
    problem.kind === "unreachable"
      ? {
          cause: "unreachable",
          text: `database unreachable at ${problem.where}: ${problem.reason}`,
          fix: "start PostgreSQL or point DATABASE_URL at a reachable server",
        }
      : problem.kind === "no-database"
        ? {
            cause: "no-database",
            text: `database "${problem.database}" does not exist`,
            fix: "run `optchat migrate` (it creates the database and its schema)",
          }
        : {
            cause: "schema",
            text:
              problem.version === 0
                ? "schema not migrated (no optchat tables)"
                : `schema version ${problem.version}, this code needs ${problem.expected}`,
            fix: "run `optchat migrate`",
          };
  return { state: "not set up", summary: `not set up: ${reason.text}`, reasons: [reason], notes: [] };
}

const plural = (n: number, word: string, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

/** What a queue that waits says: how many jobs, and since when. */
function waitTextOf(facts: HealthFacts): string {
  return facts.waitingJobs > 0
    ? `${facts.waitingJobs === 1 ? "1 job waits" : `${facts.waitingJobs} jobs wait`}, the oldest since ${facts.oldestWaitingSince ?? "?"} (${facts.oldestWaitingSeconds} s)`
    : "nothing waits";
}

/**
 * Failing summaries or publications: the model itself fails (a reason) when no call has succeeded since the newest
 * failure; otherwise only some odd inputs fail (a note).
 */
function failureVerdict(facts: HealthFacts): { readonly reason?: VerdictReason; readonly note?: string } {
  const failing = facts.failingNodes + facts.failingPublications;
  if (failing === 0) return {};
  const modelFails =
    facts.lastOkCallSecondsAgo === null ||
    facts.lastFailureSecondsAgo === null ||
    facts.lastOkCallSecondsAgo >= facts.lastFailureSecondsAgo;
  if (!modelFails) {
    return {
      note: `${plural(failing, "node or publication", "nodes or publications")} keep failing although other calls succeed; last error: ${facts.lastError ?? "none recorded"}`,
    };
  }
  return {
    reason: {
      cause: "model-failing",
      text: `the compactor model fails: ${plural(facts.failingNodes, "summary", "summaries")} and ${plural(facts.failingPublications, "publication")} keep failing${facts.lastFailureSecondsAgo !== null ? `, last ${facts.lastFailureSecondsAgo} s ago` : ""}: ${facts.lastError ?? "no error recorded"}`,
      fix: "fix the compactor model (OPTCHAT_SUMMARIZER, OPTCHAT_SUMMARIZER_MODEL, OPTCHAT_SUMMARIZER_URL and its key, or OpenCode's small_model); `optchat doctor` makes one test call",
    },
  };
}

/**
 * Why jobs have waited past STALLED_AFTER_SECONDS: no worker alive, all paused, or (when the model does not fail) a
 * backlog the running ones cannot take; undefined when nothing has waited that long.
 */
function stalledWaitReason(facts: HealthFacts, modelFails: boolean): VerdictReason | undefined {
  if (facts.waitingJobs === 0 || facts.oldestWaitingSeconds <= STALLED_AFTER_SECONDS) return undefined;
  const alive = facts.workers.filter(isAlive);
  const running = alive.filter((w) => !w.paused);
  const waitText = waitTextOf(facts);
  if (alive.length === 0) {
    const seen = facts.workers.length > 0 ? Math.min(...facts.workers.map((w) => w.beatAgeSeconds)) : null;
    return {
      cause: "no-worker",
      text: `${seen === null ? "no compactor worker has run on this database in the last day" : `no compactor worker alive for ${seen} s`}; ${waitText}`,
      fix:
        facts.embeddedWorker === "off"
          ? "start `optchat worker` (this OpenCode's embedded worker is off)"
          : "start `optchat worker`, or prompt in OpenCode with this plugin (its embedded worker starts when jobs wait)",
    };
  }
  if (running.length === 0) {
    return {
      cause: "workers-paused",
      text: `${plural(alive.length, "worker")} alive but paused (the local server pauses its worker while OpenCode processes run); ${waitText}`,
      fix: "start `optchat worker` to work while they run",
    };
  }
  if (modelFails) return undefined;
  return {
    cause: "backlog",
    text: `${plural(running.length, "worker")} alive but ${waitText}`,
    fix: "the workers cannot keep up or cannot take jobs: see their last errors; start another `optchat worker` or raise OPTCHAT_WORKER_CONCURRENCY",
  };
}

/** The verdict of a database that is set up. */
export function compactorVerdict(facts: HealthFacts): Verdict {
  const alive = facts.workers.filter(isAlive);
  const running = alive.filter((w) => !w.paused);
  const waitText = waitTextOf(facts);
  const failure = failureVerdict(facts);
  const stalled = stalledWaitReason(facts, failure.reason !== undefined);
  const reasons = [failure.reason, stalled].filter((reason): reason is VerdictReason => reason !== undefined);
  const notes = failure.note ? [failure.note] : [];
  if (!stalled && facts.waitingJobs > 0) notes.push(waitText);
  if (facts.budgetCapReached) {
    notes.push(
      `the compactor's daily budget is spent (${facts.budgetCapReached}): new summaries are labelled fallbacks until the next UTC day`,
    );
  }
  if (reasons.length > 0) {
    return { state: "stalled", summary: `stalled: ${reasons.map((r) => r.text).join("; ")}`, reasons, notes };
  }
  const workers =
    alive.length === 0
      ? "no worker running (one starts with OpenCode when there is work)"
      : `${plural(alive.length, "worker")} alive${alive.length > running.length ? ` (${alive.length - running.length} paused)` : ""}`;
  return { state: "working", summary: `working: ${workers}, ${waitText}`, reasons: [], notes };
}

/** What one session's verdict is decided from (`optchat inspect`, memory_inspect). */
export interface SessionFacts {
  /** Active turns no process holds any more, and the last holder. */
  readonly stuckTurnIds: readonly string[];
  readonly stuckHolder: string | null;
  /** Advice for a stuck turn (the same words as `optchat audit`). */
  readonly stuckAdvice: string;
  readonly failingNodes: number;
  readonly failingPublications: number;
  /** Messages not summarized yet or finished turns not published yet. */
  readonly pending: boolean;
  /** The compactor's verdict over the whole database. */
  readonly compactor: Verdict;
  readonly budgetCapReached: string | null;
}

/**
 * One line, first word the state: `stuck`, `failing`, `stalled`, `degraded`, `working` or `up to date`. A stuck turn
 * and a failing compactor say what to do first; a spent budget is said otherwise.
 */
export function sessionVerdict(facts: SessionFacts): string {
  if (facts.stuckTurnIds.length > 0) {
    return `stuck: turn ${facts.stuckTurnIds.join(", ")} is still active but no OpenCode process holds the session (last holder ${facts.stuckHolder}); ${facts.stuckAdvice}`;
  }
  if (facts.failingNodes > 0 || facts.failingPublications > 0) {
    const model = facts.compactor.reasons.find((r) => r.cause === "model-failing");
    return `failing: the compactor keeps failing for this session (see lastNodeError / lastPublicationError)${model ? `; ${model.text}; ${model.fix}` : ""}`;
  }
  const stall = facts.compactor.reasons.find((r) => r.cause !== "model-failing");
  if (facts.pending && stall) return `stalled: ${stall.text}; ${stall.fix}`;
  if (facts.budgetCapReached) {
    return `degraded: the compactor's budget is spent (${facts.budgetCapReached}); new summaries are labelled fallbacks until the next UTC day`;
  }
  return facts.pending ? "working: summaries or publications are pending" : "up to date";
}
