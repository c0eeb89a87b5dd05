/**
 * What makes a compactor answer unusable before its size is even looked at (seed 002 §4.2–4.3, issue 13 item 6). Pure.
 *
 * - empty: nothing after trimming. Seed 002 §4.3 fails the node; it is tried again after the fixed delay.
 * - refusal: the provider stopped for its content filter, or the answer is a refusal rather than a line ("I'm sorry,
 *   I can't help with that"). A summary line starts with a kind tag, never like that. Kept out of the conversation:
 *   the node fails and the retry starts a fresh one (a refusal left in the context tends to be repeated).
 * - reference: the line starts with an id or a ref (`4790+1|…`, `[12] …`, `12|…`). Models copy such markers when
 *   they see them (seed 002 §4.2 measured 6 of 16 tries); nothing we send has them, but an answer that starts with one
 *   would forge an address in the view. Answered in the same conversation, like a size retry.
 */

export type AnswerProblem = "empty" | "refusal" | "reference";

const REFERENCE_START = /^\s*(?:pub:)?\d+\+\d+\b|^\s*\[\d+\]|^\s*\d+\s*\|/;
const REFUSAL_START =
  /^\s*(?:I['’]m sorry|I am sorry|sorry[,.]|I apologi[sz]e|I can(?:not|['’]t)|I won['’]t|I will not|I['’]m (?:not able|unable)|I am (?:not able|unable)|As an AI)\b/i;

/** Why `answer` cannot be used as a line, or undefined when it can (its size is checked separately). */
export function answerProblem(answer: string, finishReason?: string): AnswerProblem | undefined {
  if (finishReason === "content-filter") return "refusal";
  const line = answer.trim();
  if (line.length === 0) return "empty";
  if (REFUSAL_START.test(line)) return "refusal";
  if (REFERENCE_START.test(line)) return "reference";
  return undefined;
}

/** The follow-up when a line starts with an id or a ref: ask for the line again without it. */
export function referenceFeedback(line: string): string {
  const start = line.trim().slice(0, 24);
  return `That line starts with a reference ("${start}…"). Lines carry no ids, numbers of messages or ranges: write the same line again without it, starting with the first item's kind.`;
}
