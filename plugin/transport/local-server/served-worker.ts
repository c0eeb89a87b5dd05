import type { Config } from "../../../src/memory/index.js";
import type { CompactorHandle } from "../../host/embedded-worker.js";
import type { ServerWorkers } from "./workers.js";

/**
 * The compactor of a process the optchat local server serves: the server's worker for its database
 * (plugin/transport/local-server/workers.ts). The process starts none of its own; a turn that ended, or a request whose memory waits
 * for summaries, makes the server's worker work at once.
 */
export class ServedWorker implements CompactorHandle {
  readonly startReason = undefined;

  constructor(
    private readonly workers: ServerWorkers,
    private readonly config: Config,
  ) {}

  get state(): string {
    return `the local server's: ${this.workers.state(this.config)}`;
  }

  get error(): string | undefined {
    return this.workers.error(this.config);
  }

  /** A session went idle: its turn ended, and its publication is due now (p99 <= 2 s, issue 37's soak). */
  onSessionIdle(): void {
    this.workers.demand(this.config);
  }

  onFirstRequestSent(): void {}

  async onRequest(boundary: number, builtLeaves: () => Promise<number>): Promise<void> {
    if (boundary > 0 && (await builtLeaves()) < boundary) this.workers.demand(this.config);
  }

  async stop(): Promise<void> {}

  async released(): Promise<void> {}
}
