/**
 * The scripted model's diligent agent (issue 36, `npm run bench -- long-turn`): a long task of numbered steps, each a
 * `bash` call whose output opens with `STEP k/N DONE`. On every main request the agent reads everything the request
 * shows it (the person's words, tool results, memory blocks, checkpoints, a native compaction summary) and calls the
 * FIRST step whose output it cannot see; when it sees them all it says it is done. Progress the request lost therefore
 * shows up as repeated steps, never as silently skipped ones.
 *
 * What counts as seeing step k: the line `STEP k/N DONE` anywhere in the request, or a range `STEP {a..b}/N DONE`
 * with a ≤ k ≤ b (the brace range is how a fold of consecutive alike lines, or a summary, says "all of these"). The
 * command itself never contains that line (printf's arguments are separate), so a call without its visible output
 * does not count.
 *
 * The task: `LONGTASK steps=N bytes=B` anywhere in the request (the person's prompt, or memory quoting it).
 */

export const DONE_PREFIX = "LONGTASK COMPLETE";
export const LOST_PREFIX = "LONGTASK LOST";

const TASK = /LONGTASK steps=(\d+) bytes=(\d+)(?: big=(\d+):(\d+))?/;

export interface LongTask {
  readonly steps: number;
  readonly bytes: number;
  /** One step whose output is far larger (`big=k:bytes`): a single result larger than the window. */
  readonly big?: { readonly step: number; readonly bytes: number };
}

/** The person's prompt of a long task (with `big`, step big.step prints big.bytes). */
export function longTaskPrompt(steps: number, bytes: number, big?: { step: number; bytes: number }): string {
  const extra = big ? ` big=${big.step}:${big.bytes}` : "";
  return `LONGTASK steps=${steps} bytes=${bytes}${extra}: run steps 1 to ${steps} in order, one bash call each, and report when every step's output has been seen.`;
}

/** The task the request asks for: its last mention (the current request comes after memory of other sessions). */
export function findTask(text: string): LongTask | undefined {
  const match = [...text.matchAll(new RegExp(TASK.source, "g"))].at(-1);
  if (!match) return undefined;
  const big = match[3] !== undefined ? { step: Number(match[3]), bytes: Number(match[4]) } : undefined;
  return { steps: Number(match[1]), bytes: Number(match[2]), ...(big ? { big } : {}) };
}

/** The bash command of step k: `STEP k/N DONE`, then filler lines up to about `bytes` bytes of output. */
export function stepCommand(step: number, task: LongTask): string {
  const line = `step ${step} of ${task.steps}, line %05g: lorem ipsum dolor sit amet, consectetur adipiscing`;
  const lineBytes = line.length - 4 + 5 + 1;
  const bytes = task.big?.step === step ? task.big.bytes : task.bytes;
  const lines = Math.max(1, Math.floor((bytes - 20) / lineBytes));
  const done = `printf 'STEP %s/%s DONE\\n' ${step} ${task.steps}`;
  // A big output says it is done at its end too: a host that truncates long output keeps its end.
  return `${done}; seq -f '${line}' 1 ${lines}${bytes !== task.bytes ? `; ${done}` : ""}`;
}

/** The step a command runs (from the printf's arguments), or undefined. */
export function stepOfCommand(command: string): number | undefined {
  const match = /^printf 'STEP %s\/%s DONE\\n' (\d+) (\d+);/.exec(command);
  return match ? Number(match[1]) : undefined;
}

/**
 * Each step's runs in a session as OpenCode stored it (its messages' tool parts, in order): the output of every run.
 * A step that ran twice has two entries, so lost progress shows as repeated steps.
 */
// biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON
export function stepRuns(messages: readonly any[]): Map<number, string[]> {
  const runs = new Map<number, string[]>();
  for (const part of messages.flatMap((m) => m.parts ?? [])) {
    const step = part.type === "tool" ? stepOfCommand(String(part.state?.input?.command ?? "")) : undefined;
    if (step !== undefined) runs.set(step, [...(runs.get(step) ?? []), String(part.state?.output ?? "")]);
  }
  return runs;
}

/** The steps of an N-step task whose output the text shows. */
export function seenSteps(text: string, steps: number): Set<number> {
  const seen = new Set<number>();
  for (const match of text.matchAll(/STEP (\d+)\/(\d+) DONE/g)) {
    if (Number(match[2]) === steps) seen.add(Number(match[1]));
  }
  for (const match of text.matchAll(/STEP \{(\d+)\.\.(\d+)\}\/(\d+) DONE/g)) {
    if (Number(match[3]) !== steps) continue;
    const [from, to] = [Number(match[1]), Number(match[2])];
    for (let k = from; k <= Math.min(to, steps); k++) seen.add(k);
  }
  return seen;
}

export type DiligentMove =
  | { readonly type: "call"; readonly step: number; readonly command: string }
  | { readonly type: "done"; readonly text: string };

/** The agent's next move on a request whose whole text is `text`; undefined when no long task is visible. */
export function diligentMove(text: string): DiligentMove | undefined {
  const task = findTask(text);
  if (!task) return undefined;
  const seen = seenSteps(text, task.steps);
  for (let k = 1; k <= task.steps; k++) {
    if (!seen.has(k)) return { type: "call", step: k, command: stepCommand(k, task) };
  }
  return { type: "done", text: `${DONE_PREFIX}: all ${task.steps} steps done.` };
}

/** `{a..b}` ranges of a set of step numbers, as the summary of a diligent summarizer writes them. */
export function stepRanges(steps: ReadonlySet<number>, total: number): string[] {
  const sorted = [...steps].sort((a, b) => a - b);
  const ranges: string[] = [];
  let start: number | undefined;
  let prev = -1;
  for (const k of [...sorted, Number.POSITIVE_INFINITY]) {
    if (start !== undefined && k === prev + 1) {
      prev = k;
      continue;
    }
    if (start !== undefined)
      ranges.push(start === prev ? `STEP ${start}/${total} DONE` : `STEP {${start}..${prev}}/${total} DONE`);
    start = k;
    prev = k;
  }
  return ranges;
}

/**
 * What a diligent summarizer keeps of a long task when OpenCode compacts the conversation natively: the task line and
 * the steps whose output the conversation shows. Undefined when the conversation has no long task.
 */
export function progressSummary(conversation: string): string | undefined {
  const task = findTask(conversation);
  if (!task) return undefined;
  const ranges = stepRanges(seenSteps(conversation, task.steps), task.steps);
  return [
    `Task: LONGTASK steps=${task.steps} bytes=${task.bytes}`,
    `Progress: ${ranges.join(", ") || "none yet"}`,
  ].join("\n");
}
