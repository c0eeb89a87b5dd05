import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import type { Memory, Session } from "../../src/memory/index.js";
import type { Clock, Timer } from "../base/clock.js";
import type { Diagnostics } from "../base/diagnostics.js";
import { HOST } from "../base/identity.js";
import { PromptRefused } from "../base/prompt-refused.js";
import { SerialQueue } from "../base/serial-queue.js";
import type { LeaseView, SessionState } from "./session-state.js";

export { PromptRefused } from "../base/prompt-refused.js";

/**
 * A session's lease slice: written only here, by LeaseKeeper; every other part reads it as `LeaseView`
 * (plugin/turns/session-state.ts).
 */
export class LeaseSlice implements LeaseView {
  held: { fence: number; timer: Timer | undefined } | undefined = undefined;
  lastFence: number | undefined = undefined;
  claimDeferred = false;
  claimRefused: string | undefined = undefined;
  /**
   * The session's claims and releases, one after the other in the order they were asked: a claim that overtook this
   * process's own release (on another pool connection) would be expired by it.
   */
  readonly calls = new SerialQueue();
}

const slice = (state: SessionState): LeaseSlice => state.lease as LeaseSlice;

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
   * failure is recorded and the prompt runs natively. `deferred`: the claim runs after `chat.message` returned
   * (plugin/turns/admission.ts `claimsLater`), so a refusal is kept for the turn's requests to raise. True when another
   * process drove the session since this process's last claim (its fence jumped): what this process knows of the
   * session's records, turns and cache epoch is then out of date.
   */
  async claim(state: SessionState, session: Session, deferred = false): Promise<boolean> {
    const lease = slice(state);
    const claim = await lease.calls.run(() => this.claimCalls(state, session));
    if (claim && !claim.acquired) {
      const seconds = Math.max(0, Math.ceil((claim.expiresAt.getTime() - this.clock.now()) / 1000));
      const refused = new PromptRefused(
        `optchat: session ${state.hostSessionId} is being driven by another OpenCode process (${claim.holder}); two processes prompting one session make OpenCode 1.18.33 loop. Wait for its turn to end (its claim expires in ${seconds} s unless renewed), or continue in that process. Setting: OPTCHAT_LEASE_SECONDS.`,
      );
      if (deferred) lease.claimRefused = refused.message;
      throw refused;
    }
    lease.claimRefused = undefined;
    if (!claim) return false;
    const drivenElsewhere = lease.lastFence !== undefined && claim.fence > lease.lastFence + 1;
    lease.lastFence = claim.fence;
    if (lease.held?.fence !== claim.fence) {
      this.clock.clear(lease.held?.timer);
      lease.held = { fence: claim.fence, timer: this.renewEvery(state, session) };
    }
    return drivenElsewhere;
  }

  /** The first claim of the session is made after `chat.message` returns (plugin/turns/admission.ts `claimsLater`). */
  deferFirstClaim(state: SessionState): void {
    slice(state).claimDeferred = true;
  }

  /** The claim's round trips: undefined when the database failed (recorded; the prompt runs natively). */
  private async claimCalls(state: SessionState, session: Session) {
    const ttlMs = this.ttlMs;
    const ask = (takeOverFrom?: string) =>
      this.memory.host.claimLease({
        sessionId: session.sessionId,
        holder: this.holder,
        ttlMs,
        ...(takeOverFrom ? { takeOverFrom } : {}),
      });
    try {
      let claim = await ask();
      // Released between the claim and the read of who holds it: free now.
      if (!claim.acquired && claim.expiresAt.getTime() <= this.clock.now()) claim = await ask();
      if (!claim.acquired && holderIsDead(claim.holder)) claim = await ask(claim.holder);
      return claim;
    } catch (error) {
      // Without the database there is no memory either; the prompt runs natively and the problem is recorded.
      await this.diagnostics.problem("lease", state.hostSessionId, error);
      return undefined;
    }
  }

  /** Renews the session's claim every third of its lifetime; a renewal that finds it lost drops it and says so. */
  private renewEvery(state: SessionState, session: Session) {
    const ttlMs = this.ttlMs;
    return this.clock.setInterval(() => {
      const lease = slice(state);
      const fence = lease.held?.fence;
      if (fence === undefined) return;
      this.memory.host
        .renewLease({ sessionId: session.sessionId, holder: this.holder, fence, ttlMs })
        .then((held) => {
          // A newer claim may have replaced this lease while the renewal was on its way: leave that one alone.
          if (held || lease.held?.fence !== fence) return;
          this.clock.clear(lease.held?.timer);
          lease.held = undefined;
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
    const lease = slice(state);
    const held = lease.held;
    const session = state.session;
    if (!held || !session) return;
    if (state.admitting > 0 || [...state.turns.values()].some((t) => !t.finished)) return;
    this.clock.clear(held.timer);
    lease.held = undefined;
    await lease.calls.run(() =>
      this.memory.host.releaseLease({ sessionId: session.sessionId, holder: this.holder, fence: held.fence }).then(
        () => undefined,
        (error) => this.diagnostics.problem("lease", state.hostSessionId, error),
      ),
    );
  }

  /** Stops renewing (the claim then expires by itself): a timer must not outlive the pool it renews through. */
  stopRenewing(state: SessionState): void {
    this.clock.clear(slice(state).held?.timer);
  }

  /** The session was deleted: its lease is no longer renewed nor released by this process. */
  forget(state: SessionState): void {
    this.stopRenewing(state);
    slice(state).held = undefined;
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
