/**
 * Host reconciliation (seed 000 §3: the host transcript is the source). A turn left active by a process that stopped
 * (closed at once after the answer, killed, or its final event never handled) is repaired from what OpenCode 1.18.33
 * stored: every finished message of the turn that optchat lacks is ingested with the same finalization keys the live
 * path uses (plugin/messages.ts: `<messageID>:user`, the part ids, `<messageID>:error`), so a message that was in fact
 * stored is a duplicate and nothing is sealed twice; the turn then gets the outcome its last message says.
 */
import {
  assistantRecordDrafts,
  type HostMessage,
  type RecordDraft,
  stepOutcome,
  userRecordDrafts,
} from "./messages.js";

export interface TurnRepair {
  /** Messages to ingest into the turn, in transcript order, with their records and the time they finished. */
  readonly messages: readonly { readonly messageId: string; readonly at: number | undefined; drafts: RecordDraft[] }[];
  readonly outcome: "completed" | "interrupted" | "failed";
  /** Why this outcome, for the log. */
  readonly reason: string;
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
    return { messages: [], outcome: "interrupted", reason: "OpenCode's transcript does not hold its user message" };
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
  if (!last) return { messages, outcome: "interrupted", reason: "OpenCode holds no answer to it" };
  const step = stepOutcome(last.info);
  if (!step.final) return { messages, outcome: "interrupted", reason: "its last step never finished" };
  if (!step.terminal) return { messages, outcome: "interrupted", reason: "it stopped after a step that went on" };
  return { messages, outcome: step.outcome, reason: `OpenCode's transcript holds its final step (${step.outcome})` };
}
