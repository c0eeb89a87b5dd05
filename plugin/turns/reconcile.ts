/**
 * Host reconciliation (seed 000 §3: the host transcript is the source). A turn left active by a process that stopped
 * (closed at once after the answer, killed, or its final event never handled) is repaired from what OpenCode 1.18.33
 * stored: every finished message of the turn that optchat lacks is ingested with the same finalization keys the live
 * path uses (plugin/opencode/messages.ts: `<messageID>:user`, the part ids, `<messageID>:error`), so a message that was in fact
 * stored is a duplicate and nothing is sealed twice; the turn then gets the outcome its last message says.
 */
import type { Memory, Session, Turn } from "../../src/memory/index.js";
import {
  assistantRecordDrafts,
  type HostMessage,
  type RecordDraft,
  stepOutcome,
  userRecordDrafts,
} from "../opencode/messages.js";

export interface TurnRepair {
  /** Messages to ingest into the turn, in transcript order, with their records and the time they finished. */
  readonly messages: readonly { readonly messageId: string; readonly at: number | undefined; drafts: RecordDraft[] }[];
  readonly outcome: "completed" | "interrupted" | "failed";
  /** Why this outcome, for the log. */
  readonly reason: string;
  /** True when the outcome is the one the turn's own final step says (not interrupted for lack of one). */
  readonly decided: boolean;
}

/**
 * What to store and record for the stale turn opened by user message `turnId`, given OpenCode's transcript of the
 * session (oldest first) and the host messages optchat already holds records of.
 *
 * The turn's messages are its user message and the assistant messages whose parent it is (each model step is one;
 * facts §1). Only finished ones (`time.completed`) are stored, as on the live path: a killed step left an empty,
 * never-completed message (facts "Killed process"). The outcome is the last finished step's when it ended the turn; a
 * turn whose last step is unfinished or asked for tools that never ran on is interrupted, as before this repair.
 */
export function repairPlan(
  transcript: readonly HostMessage[],
  turnId: string,
  stored: ReadonlySet<string>,
): TurnRepair {
  const user = transcript.find((m) => m.info.id === turnId && m.info.role === "user");
  if (!user) {
    return {
      messages: [],
      outcome: "interrupted",
      reason: "OpenCode's transcript does not hold its user message",
      decided: false,
    };
  }
  const steps = transcript.filter((m) => m.info.role === "assistant" && m.info.parentID === turnId);
  const messages: { messageId: string; at: number | undefined; drafts: RecordDraft[] }[] = [];
  if (!stored.has(user.info.id)) {
    const drafts = userRecordDrafts(user.info, user.parts);
    if (drafts.length > 0) messages.push({ messageId: user.info.id, at: user.info.time?.created, drafts });
  }
  for (const step of steps) {
    if (!stepOutcome(step.info).final || stored.has(step.info.id)) continue;
    const drafts = assistantRecordDrafts(step.info, step.parts);
    if (drafts.length > 0) messages.push({ messageId: step.info.id, at: step.info.time?.completed, drafts });
  }
  const last = steps.at(-1);
  if (!last) return { messages, outcome: "interrupted", reason: "OpenCode holds no answer to it", decided: false };
  const step = stepOutcome(last.info);
  if (!step.final) return { messages, outcome: "interrupted", reason: "its last step never finished", decided: false };
  if (!step.terminal) {
    return { messages, outcome: "interrupted", reason: "it stopped after a step that went on", decided: false };
  }
  return {
    messages,
    outcome: step.outcome,
    reason: `OpenCode's transcript holds its final step (${step.outcome})`,
    decided: true,
  };
}

/** What repairing a session's stale turns needs from the adapter. */
export interface RepairDeps {
  readonly memory: Memory;
  /** OpenCode's stored transcript of the session (undefined when the client does not answer). */
  transcript(): Promise<HostMessage[] | undefined>;
  /** Seals a message's records into a turn with the live path's finalization keys. */
  ingest(turnId: string, messageId: string, at: number | undefined, drafts: readonly RecordDraft[]): Promise<void>;
  log(message: string): void;
}

/**
 * Repairs `stale` (turns of `session` no running process drives), oldest first: stores what OpenCode's transcript
 * holds of each that optchat lacks, and records its outcome.
 *
 * `prompt` (the session is prompted again, its lease held by this process): every stale turn ends, interrupted when the
 * transcript cannot say otherwise, as before this repair existed. `start` (a pass over the project's stuck turns when a
 * process starts, without the session's lease: repairs are idempotent): only turns whose transcript holds their final
 * step are repaired; the others are left to the session's next prompt (the transcript may be another machine's, or
 * another OpenCode data directory's, and say nothing). Returns how many turns were ended.
 */
export async function repairStaleTurns(
  deps: RepairDeps,
  session: Session,
  stale: readonly Turn[],
  mode: "prompt" | "start",
): Promise<number> {
  if (stale.length === 0) return 0;
  const transcript = await deps.transcript().catch(() => undefined);
  if (!transcript && mode === "start") return 0;
  let ended = 0;
  for (const turn of [...stale].sort((a, b) => (a.turnId < b.turnId ? -1 : a.turnId > b.turnId ? 1 : 0))) {
    const stored = transcript
      ? new Set((await deps.memory.host.hostMessageSeqs(session.sessionId, turn.generation)).keys())
      : new Set<string>();
    const plan: TurnRepair = transcript
      ? repairPlan(transcript, turn.turnId, stored)
      : { messages: [], outcome: "interrupted", reason: "OpenCode's transcript could not be read", decided: false };
    if (mode === "start" && !plan.decided) continue;
    for (const message of plan.messages) await deps.ingest(turn.turnId, message.messageId, message.at, message.drafts);
    await deps.memory.finishTurn({ sessionId: session.sessionId, turnId: turn.turnId }, plan.outcome);
    ended += 1;
    const records = plan.messages.reduce((sum, m) => sum + m.drafts.length, 0);
    deps.log(
      `optchat: turn ${turn.turnId} of ${session.hostSessionId} was left unfinished by a stopped process; ${records} missing record(s) stored from OpenCode's transcript; recorded as ${plan.outcome}: ${plan.reason}`,
    );
  }
  return ended;
}
