/**
 * The checks of the compactor quality harness (issue 13 item 7), pure. A check is about some messages of a session
 * (`about`, their indices) and is applied to every built node whose range covers one of them, at every level, and to
 * the top of the tree: the fact has to survive each merge, not only the first summary. A node that is a labelled
 * fallback (the budget was spent) fails every check: it is never counted as a summary (seed 000 §10).
 *
 * Kinds: decision / identifier / not-done / not-obeyed take regular expressions (case-insensitive unless
 * caseSensitive): every `all` must match, no `none` may. correction takes the old and the new value: the new must be
 * there, and the old may appear only where the text marks it as replaced.
 */
import { FALLBACK_SUMMARIZER } from "../../src/core/fallback.js";

interface PatternCheck {
  readonly id: string;
  readonly kind: "decision" | "identifier" | "not-done" | "not-obeyed";
  readonly about: readonly number[];
  readonly all?: readonly string[];
  readonly none?: readonly string[];
  readonly caseSensitive?: boolean;
  readonly because: string;
}

interface CorrectionCheck {
  readonly id: string;
  readonly kind: "correction";
  readonly about: readonly number[];
  readonly old: string;
  readonly new: string;
  readonly because: string;
}

export type QualityCheck = PatternCheck | CorrectionCheck;

export interface BuiltNode {
  readonly level: number;
  readonly index: number;
  readonly text: string;
  readonly summarizer: string;
}

export interface CheckOutcome {
  readonly session: string;
  readonly check: string;
  readonly kind: QualityCheck["kind"];
  /** The node's ref, start+count. */
  readonly ref: string;
  readonly level: number;
  readonly top: boolean;
  readonly passed: boolean;
  readonly problem?: string;
}

/** Words near an old value that mark it as replaced ("not 8080", "8080 -> 9090", "instead of 8080", ...). */
const REPLACED_NEAR = /\bnot\b|instead|replac|correct|chang|no longer|\bwas\b|taken|collid|->|→|\bto\b|\bnow\b/i;

export function evaluateSession(
  session: { readonly name: string; readonly messages: number; readonly checks: readonly QualityCheck[] },
  nodes: readonly BuiltNode[],
): CheckOutcome[] {
  const topLevel = Math.floor(Math.log2(session.messages));
  const outcomes: CheckOutcome[] = [];
  for (const check of session.checks) {
    const targets = nodes.filter((node) => {
      const start = node.index * 2 ** node.level;
      const end = start + 2 ** node.level;
      const top = node.level === topLevel && node.index === 0;
      return top || check.about.some((m) => m >= start && m < end);
    });
    for (const node of targets) {
      const problem = problemOf(check, node);
      outcomes.push({
        session: session.name,
        check: check.id,
        kind: check.kind,
        ref: `${node.index * 2 ** node.level}+${2 ** node.level}`,
        level: node.level,
        top: node.level === topLevel && node.index === 0,
        passed: problem === undefined,
        ...(problem ? { problem } : {}),
      });
    }
  }
  return outcomes;
}

/** Why a node fails a check, or undefined when it passes. */
export function problemOf(check: QualityCheck, node: Pick<BuiltNode, "text" | "summarizer">): string | undefined {
  if (node.summarizer === FALLBACK_SUMMARIZER) return "a labelled fallback, not a summary";
  const text = node.text;
  if (check.kind === "correction") {
    if (!text.includes(check.new)) return `the correction ${check.new} is missing`;
    for (let at = text.indexOf(check.old); at >= 0; at = text.indexOf(check.old, at + 1)) {
      const near = text.slice(Math.max(0, at - 40), at + check.old.length + 40);
      if (!REPLACED_NEAR.test(near)) return `${check.old} reads as current: "${near}"`;
    }
    return undefined;
  }
  const flags = check.caseSensitive ? "u" : "iu";
  for (const pattern of check.all ?? []) {
    if (!new RegExp(pattern, flags).test(text)) return `missing /${pattern}/`;
  }
  for (const pattern of check.none ?? []) {
    const match = new RegExp(pattern, flags).exec(text);
    if (match) return `says /${pattern}/: "${match[0]}"`;
  }
  return undefined;
}

/** Pass counts per check kind and overall, and whether the top of every tree passed. */
export function summarizeOutcomes(outcomes: readonly CheckOutcome[]) {
  const byKind: Record<string, { passed: number; total: number; topPassed: number; tops: number }> = {};
  for (const outcome of outcomes) {
    const entry = byKind[outcome.kind] ?? { passed: 0, total: 0, topPassed: 0, tops: 0 };
    byKind[outcome.kind] = entry;
    entry.total += 1;
    if (outcome.passed) entry.passed += 1;
    if (outcome.top) {
      entry.tops += 1;
      if (outcome.passed) entry.topPassed += 1;
    }
  }
  const passed = outcomes.filter((o) => o.passed).length;
  return {
    checks: outcomes.length,
    passed,
    passRate: outcomes.length > 0 ? Math.round((passed / outcomes.length) * 1000) / 1000 : null,
    topPassRate: (() => {
      const tops = outcomes.filter((o) => o.top);
      return tops.length > 0 ? Math.round((tops.filter((o) => o.passed).length / tops.length) * 1000) / 1000 : null;
    })(),
    byKind,
  };
}
