/**
 * The request's real size from what the provider reported (issue 36 "Real sizing"). Pure. The plugin estimates text at
 * a fixed, deliberately high rate (src/core/context.ts estimateTokens); each step's reported input tokens against the
 * estimate of the messages that request carried gives two unknowns: the instructions and tools the plugin cannot see
 * (a constant of the session's agent and model) and how many provider tokens one estimated token really is. A line
 * fitted through the session's last requests gives both, so fit is decided on what the provider counts.
 */

/** One request: the plugin's estimate of its messages, and the input tokens the provider reported for it. */
export interface SizeSample {
  readonly estimated: number;
  readonly reported: number;
}

export interface FittedSize {
  /** Provider tokens per estimated token of the messages. */
  readonly ratio: number;
  /** Provider tokens of everything but the messages (instructions, tools). */
  readonly overhead: number;
}

/** Samples kept per session: recent enough to follow a changed system prompt, enough to fit through. */
export const SIZE_SAMPLES = 8;
/** The least spread of the samples' estimates for a slope (a smaller one is mostly rounding). */
export const MIN_SPREAD_TOKENS = 256;
/** The ratio is trusted within these bounds only (text unlike what was measured can cost more). */
export const MIN_RATIO = 0.6;
export const MAX_RATIO = 2;

/**
 * The line through the samples (least squares): ratio = its slope within [MIN_RATIO, MAX_RATIO], overhead = what is
 * left of the latest sample (never negative). Undefined without two samples whose estimates differ by MIN_SPREAD_TOKENS.
 */
export function fitRequestSize(samples: readonly SizeSample[]): FittedSize | undefined {
  const latest = samples.at(-1);
  if (!latest || samples.length < 2) return undefined;
  const xs = samples.map((s) => s.estimated);
  if (Math.max(...xs) - Math.min(...xs) < MIN_SPREAD_TOKENS) return undefined;
  const meanX = xs.reduce((a, b) => a + b, 0) / samples.length;
  const meanY = samples.reduce((a, s) => a + s.reported, 0) / samples.length;
  let cov = 0;
  let varX = 0;
  for (const s of samples) {
    cov += (s.estimated - meanX) * (s.reported - meanY);
    varX += (s.estimated - meanX) ** 2;
  }
  const ratio = clampRatio(cov / varX);
  const overhead = latest.reported - ratio * latest.estimated;
  if (overhead >= 0) return { ratio, overhead: Math.round(overhead) };
  // Whole-token reports can tilt the slope past a request with almost no instructions, to a negative overhead: the
  // least-squares line with no overhead (through the origin) fits the reports instead.
  let xy = 0;
  let xx = 0;
  for (const s of samples) {
    xy += s.estimated * s.reported;
    xx += s.estimated ** 2;
  }
  return { ratio: clampRatio(xy / xx), overhead: 0 };
}

function clampRatio(ratio: number): number {
  return Math.min(MAX_RATIO, Math.max(MIN_RATIO, ratio));
}

/** A sample added to the kept ones (the oldest dropped past SIZE_SAMPLES). */
export function withSample(samples: readonly SizeSample[], sample: SizeSample): SizeSample[] {
  return [...samples, sample].slice(-SIZE_SAMPLES);
}
