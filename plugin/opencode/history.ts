/**
 * A stored OpenCode 1.18.33 session read back as the turns the plugin would have recorded had it been running: for
 * `optchat import --opencode`. Pure: messages in, turns out.
 *
 * The plugin sees a session as hook calls and events (plugin/host/adapter.ts); a stored session is the end state of those,
 * so the same rules are applied to it in message order, with the same mappings (plugin/opencode/messages.ts):
 * - a turn per prompt the user typed (`chat.message` fires for it; not for OpenCode's synthetic "Continue…" message
 *   nor a compaction request, facts §2), its id the user message's id, its record the whole user message, stamped
 *   with the message's creation time;
 * - an assistant step belongs to the turn of its parent user message; one without a known parent (after a native
 *   compaction) to the latest turn while that has no outcome yet, else to a turn of its own named after its parent;
 * - a step is stored once final (`time.completed`), stamped with that time; a step never completed (the process was
 *   killed) stores nothing and ends its turn as interrupted, as the plugin's reconciliation does at the next prompt;
 * - a terminal step (facts §1 "Which event means final") ends its turn and every earlier open one (queued prompts
 *   answered together) with its outcome;
 * - a new prompt typed while nothing was running ends the open turns that stopped (a rejected permission, a step
 *   that went on no further) with their terminal outcome, else interrupted, as the plugin does on an idle session; at
 *   the end of the history every open turn ends that way too.
 */
import {
  assistantRecordDrafts,
  type HostMessage,
  isSyntheticUserMessage,
  type RecordDraft,
  requestQuery,
  stepOutcome,
  userRecordDrafts,
} from "./messages.js";

export type TurnOutcome = "completed" | "interrupted" | "failed";

/** One host message's records, as the plugin ingests them (one ingestMany per message). */
export interface HistoryMessage {
  readonly messageId: string;
  /** The time the plugin stamps its records with: creation for a user message, completion for a step. */
  readonly at: number | undefined;
  readonly drafts: readonly RecordDraft[];
}

export interface HistoryTurn {
  readonly turnId: string;
  /** The user's words (admitTurn's query); absent for a turn OpenCode started by itself. */
  readonly query: string | undefined;
  readonly messages: readonly HistoryMessage[];
  readonly outcome: TurnOutcome;
}

export interface SessionHistory {
  readonly turns: readonly HistoryTurn[];
  /** Messages that yield no records, by reason (for the import's summary). */
  readonly notStored: {
    /** Steps never completed: the process was stopped mid-step; OpenCode never repairs them. */
    readonly unfinishedSteps: number;
    /** OpenCode's own user messages (the "Continue…" after a compaction, compaction requests): no prompt, no turn. */
    readonly hostMessages: number;
    /** Assistant messages before any turn (none seen; a fork's copies keep their parents). */
    readonly outsideTurns: number;
  };
}

interface OpenTurn {
  readonly turnId: string;
  readonly query: string | undefined;
  readonly messages: HistoryMessage[];
  ending: TurnOutcome | undefined;
  outcome: TurnOutcome | undefined;
  /** A step of it was created and never completed. */
  unfinished: boolean;
}

/** The turns of one stored session (messages oldest first, as plugin/opencode/storage.ts reads them). */
export function sessionHistory(messages: readonly HostMessage[]): SessionHistory {
  const turns: OpenTurn[] = [];
  const turnOfMessage = new Map<string, OpenTurn>();
  const notStored = { unfinishedSteps: 0, hostMessages: 0, outsideTurns: 0 };
  const open = () => turns.filter((turn) => turn.outcome === undefined);
  // Every earlier open turn ends with a terminal step's outcome: the plugin orders turns by their ascending msg_ ids.
  const finishUpTo = (turnId: string, outcome: TurnOutcome) => {
    for (const turn of open()) if (turn.turnId <= turnId) turn.outcome = outcome;
  };

  // The latest completion of a step so far: a prompt typed before it was queued while OpenCode was working (messages
  // come in creation order). A step never completed does not count: its process was stopped.
  let latestCompletion = Number.NEGATIVE_INFINITY;
  for (const message of messages) {
    const { info } = message;
    if (info.role === "assistant" && info.time?.completed !== undefined) {
      latestCompletion = Math.max(latestCompletion, info.time.completed);
    }
    if (info.role === "user") {
      if (isSyntheticUserMessage(message) || message.parts.some((part) => part.type === "compaction")) {
        notStored.hostMessages += 1;
        continue;
      }
      const created = info.time?.created;
      const busy = created !== undefined && latestCompletion > created;
      if (!busy) {
        for (const turn of open()) turn.outcome = turn.unfinished ? "interrupted" : (turn.ending ?? "interrupted");
      }
      const turn = promptTurn(message);
      turns.push(turn);
      turnOfMessage.set(info.id, turn);
      continue;
    }
    if (info.role !== "assistant") continue;
    const turn = turnFor(info.parentID, turns, turnOfMessage);
    if (!turn) {
      notStored.outsideTurns += 1;
      continue;
    }
    const ending = addStep(turn, message);
    if (ending === "unfinished") notStored.unfinishedSteps += 1;
    else if (ending) finishUpTo(turn.turnId, ending);
  }
  for (const turn of open()) turn.outcome = turn.unfinished ? "interrupted" : (turn.ending ?? "interrupted");
  return {
    turns: turns.map((turn) => ({
      turnId: turn.turnId,
      query: turn.query,
      messages: turn.messages,
      outcome: turn.outcome ?? "interrupted",
    })),
    notStored,
  };
}

/** A prompt's turn, its user record its first message. */
function promptTurn(message: HostMessage): OpenTurn {
  const { info } = message;
  const query = requestQuery(message.parts);
  return {
    turnId: info.id,
    query: query || undefined,
    messages: [{ messageId: info.id, at: info.time?.created, drafts: userRecordDrafts(info, message.parts) }],
    ending: undefined,
    outcome: undefined,
    unfinished: false,
  };
}

/**
 * An assistant step of `turn`: a finished one's records join the turn, a terminal one sets its ending (returned: it
 * also ends every earlier open turn); "unfinished" for a step never completed (its process was stopped).
 */
function addStep(turn: OpenTurn, message: HostMessage): TurnOutcome | "unfinished" | undefined {
  const { info } = message;
  const step = stepOutcome(info);
  if (!step.final) {
    turn.unfinished = true;
    return "unfinished";
  }
  turn.messages.push({
    messageId: info.id,
    at: info.time?.completed,
    drafts: assistantRecordDrafts(info, message.parts),
  });
  if (!step.terminal) return undefined;
  turn.ending = step.outcome;
  return step.outcome;
}

/**
 * The turn of an assistant step (the live path's turnForAssistant, plugin/turns/tracking.ts): its parent's turn; else the latest turn while it has no
 * outcome (OpenCode going on after a native compaction, whose "Continue…" is no prompt); else a turn of its own.
 */
function turnFor(
  parentId: string | undefined,
  turns: OpenTurn[],
  turnOfMessage: Map<string, OpenTurn>,
): OpenTurn | undefined {
  const known = parentId ? turnOfMessage.get(parentId) : undefined;
  if (known) return known;
  const latest = turns.at(-1);
  if (latest && latest.outcome === undefined && latest.ending === undefined) {
    if (parentId) turnOfMessage.set(parentId, latest);
    return latest;
  }
  if (!parentId) return undefined;
  const own: OpenTurn = {
    turnId: parentId,
    query: undefined,
    messages: [],
    ending: undefined,
    outcome: undefined,
    unfinished: false,
  };
  turns.push(own);
  turnOfMessage.set(parentId, own);
  return own;
}
