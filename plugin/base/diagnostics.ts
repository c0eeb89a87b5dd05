import { appendFileSync } from "node:fs";
import { isOptchatError, type Memory } from "../../src/memory/index.js";
import type { Clock } from "./clock.js";
import { HOST } from "./identity.js";

export type Log = (level: "info" | "warn" | "error", message: string) => void;

/**
 * What went wrong in this process, where it is told: the log, the problems table (`optchat inspect`, memory_inspect)
 * and, when OPTCHAT_TIMINGS_FILE is set, one JSON line per measured operation (`npm run bench -- plugin`). Never
 * throws: it is what every hook's catch calls (a throw inside an OpenCode 1.18.33 hook can kill the user's turn).
 */
export class Diagnostics {
  problems = 0;
  lastProblem: string | undefined;

  constructor(
    private readonly memory: Memory,
    private readonly holder: string,
    private readonly timingsFile: string | undefined,
    private readonly clock: Clock,
    readonly log: Log,
  ) {}

  /** One JSON line per measured operation, when OPTCHAT_TIMINGS_FILE is set. */
  recordTiming(op: string, started: number, extra: Record<string, unknown> = {}): void {
    const file = this.timingsFile;
    if (!file) return;
    const ms = Math.round((performance.now() - started) * 1000) / 1000;
    try {
      appendFileSync(file, `${JSON.stringify({ op, ms, at: this.clock.now(), ...extra })}\n`);
    } catch (error) {
      void this.problem("timings", undefined, error);
    }
  }

  /**
   * Records a problem. `background`: work the person did not ask for (the compactor worker): its driver-level text is
   * not written where `opencode run` shows it (the person's terminal), only recorded for status and inspect
   * (OPTCHAT_DEBUG shows it).
   */
  async problem(
    operation: string,
    hostSessionId: string | undefined,
    error: unknown,
    options: { background?: boolean } = {},
  ): Promise<void> {
    this.problems += 1;
    const message = describe(error);
    this.lastProblem = `${new Date(this.clock.now()).toISOString()} ${operation}: ${message}`;
    this.log(
      options.background ? "info" : "warn",
      `optchat ${operation}${hostSessionId ? ` (${hostSessionId})` : ""}: ${message}`,
    );
    try {
      await this.memory.host.reportProblem({
        host: HOST,
        hostSessionId: hostSessionId ?? null,
        holder: this.holder,
        operation,
        code: isOptchatError(error) ? error.code : null,
        message: message.slice(0, 4000),
      });
    } catch {
      // The database itself is the problem; the log line above is all we can do.
    }
  }
}

export function describe(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}
