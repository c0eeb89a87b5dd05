import { isOptchatError, type Memory, type Session } from "../../src/memory/index.js";
import { type Diagnostics, describe } from "../base/diagnostics.js";
import { HOST } from "../base/identity.js";
import { applyRewind } from "./history-rewind.js";
import { switchMemoryOff } from "./session-diagnostics.js";
import type { SessionJobs } from "./session-jobs.js";
import type { SessionState } from "./session-state.js";

/** What this module alone writes of a session's state: its reverts. */
interface RevertFields {
  readonly removed: Set<string>;
  rewinding: Promise<void> | undefined;
  revertStaged: string | undefined;
}

const fields = (state: SessionState): RevertFields => state as unknown as RevertFields;

/**
 * Reverts as the session's jobs (issue 15 item 2): OpenCode removed messages (a revert committed at the next prompt,
 * from the revert point to the end), so the session's history in memory is rewound to before them, as a new generation
 * (memory.rewindSession), in the session's order of work; what changes in this process is decided by the pure
 * plugin/turns/history-rewind.ts. Only what cannot be rewound switches memory off, with the reason.
 */
export class SessionRewinds {
  constructor(
    private readonly memory: Memory,
    private readonly jobs: SessionJobs,
    private readonly holder: string,
    private readonly diagnostics: Diagnostics,
  ) {}

  /** `message.removed`: the next prompt's admission and requests wait for the rewind it queues. */
  onMessageRemoved(state: SessionState, messageId: string | undefined): void {
    if (state.disabled) return;
    if (!messageId) {
      this.disable(state, "OpenCode removed a message without naming it");
      return;
    }
    fields(state).removed.add(messageId);
    fields(state).rewinding = this.jobs.enqueue(state, "rewind", (session) => this.rewind(state, session));
  }

  /**
   * `session.updated` with (or without) `info.revert`: a revert staged in this process goes back to `revertTo`, and the
   * next prompt commits it (`commitStagedRevert`); undefined when it was undone.
   */
  onRevertStaged(state: SessionState, revertTo: string | undefined): void {
    fields(state).revertStaged = revertTo;
  }

  /**
   * At a prompt's admission: the prompt commits the staged revert (facts: `message.removed` follows, maybe after this
   * admission), so the session's history is rewound first and the turn is admitted in the new generation.
   */
  async commitStagedRevert(state: SessionState, session: Session): Promise<void> {
    const reverts = fields(state);
    if (!reverts.revertStaged) return;
    reverts.removed.add(reverts.revertStaged);
    reverts.revertStaged = undefined;
    await this.rewind(state, session);
  }

  /** Rewinds the session past every removed message not yet taken into account; idempotent. */
  async rewind(state: SessionState, session: Session): Promise<void> {
    if (state.removed.size === 0 || state.disabled) return;
    const removed = [...state.removed];
    let result: Awaited<ReturnType<Memory["rewindSession"]>>;
    try {
      result = await this.memory.rewindSession(session.sessionId, removed);
    } catch (error) {
      // An outage or a dropped connection: the session's work queue tries again. Anything else cannot be repaired by
      // trying again, and stale history must not be served.
      if (!isOptchatError(error) || isOptchatError(error, "DATABASE_UNAVAILABLE")) throw error;
      this.disable(
        state,
        `OpenCode removed message ${removed[0]} (a revert was committed) and optchat could not rewind the session's history: ${describe(error)}`,
      );
      return;
    }
    for (const id of removed) fields(state).removed.delete(id);
    if (result.status !== "rewound") return;
    const decision = applyRewind(state, session, removed, result.generation);
    if (decision.type === "disable") {
      this.disable(state, decision.reason);
      return;
    }
    this.diagnostics.log(
      "info",
      `optchat: ${state.hostSessionId} rewound (a revert): generation ${result.generation} keeps ${result.kept} records, ${result.superseded} superseded`,
    );
  }

  /** Switches memory off for the session (its native history is sent as it is) and records why for inspect. */
  private disable(state: SessionState, why: string): void {
    const shown = switchMemoryOff(state, why);
    this.jobs.enqueue(state, "lifecycle", async () => {
      await this.memory.host.reportProblem({
        host: HOST,
        hostSessionId: state.hostSessionId,
        holder: this.holder,
        operation: "lifecycle",
        code: "HISTORY_REWRITTEN",
        message: shown,
      });
    });
  }
}
