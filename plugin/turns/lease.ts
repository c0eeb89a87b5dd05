import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import type { Memory, Session } from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import type { Diagnostics } from "../base/diagnostics.js";
import { HOST } from "../base/identity.js";
import { PromptRefused } from "../base/prompt-refused.js";
import type { SessionState } from "./session-state.js";

export { PromptRefused } from "../base/prompt-refused.js";

/**
 * A session's lease (seed 000 §13): one OpenCode process drives a session at a time. Claimed at each admission, renewed
 * every third of its lifetime while held, released when the session has no open turn; a holder on this machine that
 * is gone is taken over at once instead of waiting for its claim to expire.
 */
export class LeaseKeeper {
  constructor(
    private readonly memory: Memory,
    private readonly holder: string,
    private readonly ttlMs: number,
    private readonly clock: Clock,
    private readonly diagnostics: Diagnostics,
  ) {}

  /**
   * Claims the session for this process at an admission; throws PromptRefused when a live process holds it. A database
   * failure is recorded and the prompt runs natively.
   */
  async claim(state: SessionState, session: Session): Promise<void> {
    const ttlMs = this.ttlMs;
    let claim: Awaited<ReturnType<Memory["host"]["claimLease"]>>;
    // A claim that overtook this process's own release (another pool connection) would be expired by it.
    await state.releasing;
    try {
      claim = await this.memory.host.claimLease({ sessionId: session.sessionId, holder: this.holder, ttlMs });
      if (!claim.acquired && claim.expiresAt.getTime() <= this.clock.now()) {
        // Released between the claim and the read of who holds it: free now.
        claim = await this.memory.host.claimLease({ sessionId: session.sessionId, holder: this.holder, ttlMs });
      }
      if (!claim.acquired && holderIsDead(claim.holder)) {
        claim = await this.memory.host.claimLease({
          sessionId: session.sessionId,
          holder: this.holder,
          ttlMs,
          takeOverFrom: claim.holder,
        });
      }
    } catch (error) {
      // Without the database there is no memory either; the prompt runs natively and the problem is recorded.
      await this.diagnostics.problem("lease", state.hostSessionId, error);
      return;
    }
    if (!claim.acquired) {
      const seconds = Math.max(0, Math.ceil((claim.expiresAt.getTime() - this.clock.now()) / 1000));
      throw new PromptRefused(
        `optchat: session ${state.hostSessionId} is being driven by another OpenCode process (${claim.holder}); two processes prompting one session make OpenCode 1.18.33 loop. Wait for its turn to end (its claim expires in ${seconds} s unless renewed), or continue in that process. Setting: OPTCHAT_LEASE_SECONDS.`,
      );
    }
    if (state.lastFence !== undefined && claim.fence > state.lastFence + 1) {
      // Another process drove this session since: its records and unfinished turns are not in this process's view.
      state.seqsLoaded = false;
      state.reconciled = false;
      // Its requests did not carry this process's cache epoch: the next request renders the memory afresh.
      state.request.forgetEpoch();
    }
    state.lastFence = claim.fence;
    if (state.lease?.fence !== claim.fence) {
      this.clock.clear(state.lease?.timer);
      state.lease = { fence: claim.fence, timer: this.renewEvery(state, session) };
    }
  }

  /** Renews the session's claim every third of its lifetime; a renewal that finds it lost drops it and says so. */
  private renewEvery(state: SessionState, session: Session) {
    const ttlMs = this.ttlMs;
    return this.clock.setInterval(() => {
      const fence = state.lease?.fence;
      if (fence === undefined) return;
      this.memory.host
        .renewLease({ sessionId: session.sessionId, holder: this.holder, fence, ttlMs })
        .then((held) => {
          // A newer claim may have replaced this lease while the renewal was on its way: leave that one alone.
          if (held || state.lease?.fence !== fence) return;
          this.clock.clear(state.lease?.timer);
          state.lease = undefined;
          void this.diagnostics.problem(
            "lease",
            state.hostSessionId,
            new Error("the session lease was lost (it expired and another process took it)"),
          );
        })
        .catch((error) => this.diagnostics.problem("lease", state.hostSessionId, error));
    }, ttlMs / 3);
  }

  /** Releases the lease once the session has no open turn and no admission under way; otherwise leaves it held. */
  async release(state: SessionState): Promise<void> {
    const lease = state.lease;
    if (!lease || !state.session) return;
    if (state.admitting > 0 || [...state.turns.values()].some((t) => !t.finished)) return;
    this.clock.clear(lease.timer);
    state.lease = undefined;
    const releasing = this.memory.host
      .releaseLease({ sessionId: state.session.sessionId, holder: this.holder, fence: lease.fence })
      .then(
        () => undefined,
        (error) => this.diagnostics.problem("lease", state.hostSessionId, error),
      );
    state.releasing = releasing;
    await releasing;
    if (state.releasing === releasing) state.releasing = undefined;
  }

  /** Stops renewing (the claim then expires by itself): a timer must not outlive the pool it renews through. */
  stopRenewing(state: SessionState): void {
    this.clock.clear(state.lease?.timer);
  }
}

/**
 * An OpenCode process as a lease holder: `opencode:<hostname>:<pid>@<start>:<random>`, for this process or, in the
 * local server, for the OpenCode process it serves (`pid`): a killed `opencode run` is then a dead holder whose claim
 * the next process takes over at once, as without the server. The start time (Linux: clock ticks after boot, from
 * /proc) tells a dead holder from a new process that got its pid: a restarted container's OpenCode usually gets the
 * very same small pid, and would otherwise wait out its own dead predecessor's claim.
 */
export function leaseHolderName(pid: number = process.pid): string {
  return `${HOST}:${hostname()}:${pid}@${processStart(pid) ?? "-"}:${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * True only when the holder is a process of this machine that is gone (or whose pid now belongs to a process started
 * at another time). Holders of other machines, or of unknown form, are never declared dead: their claims expire.
 */
export function holderIsDead(holder: string): boolean {
  const [host, machine, processPart] = holder.split(":");
  if (host !== HOST || machine !== hostname() || !processPart) return false;
  const [pid, start] = processPart.split("@");
  if (!pid || !/^\d+$/.test(pid)) return false;
  try {
    process.kill(Number(pid), 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH";
  }
  const current = start && start !== "-" ? processStart(Number(pid)) : undefined;
  return current !== undefined && current !== start;
}

/** A process's start time from /proc/<pid>/stat (field 22), or undefined where there is no /proc. */
function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesized command name (which may contain spaces) start at field 3.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}
