import cliProgress from "cli-progress";

/** Where progress goes (stderr); a terminal gets a redrawn bar, anything else lines only when asked. */
export interface ProgressStream extends NodeJS.WritableStream {
  readonly isTTY?: boolean;
}

export interface Progress {
  /** Sets the position and the values of the format's {placeholders}. */
  update(value: number, payload?: Record<string, string | number>): void;
  setTotal(total: number): void;
  stop(): void;
}

const NONE: Progress = { update() {}, setTotal() {}, stop() {} };

/**
 * A progress bar for a long command (cli-progress), on stderr so that stdout (an export, a --json answer) is never
 * touched. Shown on a terminal, or anywhere with `--progress` (then as a line every few seconds, for logs); nothing
 * otherwise, and nothing on a terminal either when --json asked for machine output without --progress.
 */
export function progressBar(
  options: { format: string; total: number; forced: boolean; json: boolean },
  stream: ProgressStream = process.stderr,
): Progress {
  const show = options.forced || (stream.isTTY === true && !options.json);
  if (!show) return NONE;
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: options.format,
      noTTYOutput: stream.isTTY !== true,
      notTTYSchedule: 5_000,
      hideCursor: stream.isTTY === true,
      clearOnComplete: false,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(Math.max(options.total, 1), 0);
  return {
    update: (value, payload) => bar.update(value, payload),
    setTotal: (total) => bar.setTotal(Math.max(total, 1)),
    stop: () => bar.stop(),
  };
}
