/**
 * A run that had to run its own thread (its local server was only starting) holds a connection to that server from
 * its start until its close (plugin/transport/local-server/client.ts `holdLocalServer`) and gives the server its
 * database and compactor model, whose worker then drains the queue after it (plugin/transport/local-server/workers.ts).
 * Here as the adapter's compactor (plugin/host/runner.ts `compactor`): the adapter sees only a worker.
 */
import { bounded } from "../../base/closing.js";
import type { EmbeddedWorker } from "../../host/embedded-worker.js";
import type { CompactorContext, Runner } from "../../host/runner.js";
import type { CompactorHandle } from "../../turns/compactor-handle.js";
import { holdLocalServer, type LocalServerHold } from "./client.js";

/** How long a close waits for the hand-off to the local server (a connection and one line on a Unix socket). */
const HAND_OFF_WITHIN_MS = 1_000;

/**
 * Jobs due when a run starts without its local server were left by a server that stopped (an idle-out drains first):
 * the next runs' memory waits for them. At 5 s the soak's p99 publication lag was 6.0 s over 13 kills (the server
 * that replaced the killed one learns the database only from this run, and is paused while it runs).
 */
const LEFT_WAITING_S = 0;

/** The runner's compactor for a run whose local server at `socketPath` is starting. */
export function handingOver(socketPath: string): NonNullable<Runner["compactor"]> {
  return (context, own) => {
    const worker = own();
    // Nobody else runs the jobs a stopped server left now, and the next runs' memory waits for them: start at once.
    void context.memory.host.jobsWaitingForWorker(LEFT_WAITING_S).then(
      (left) => left && worker.startNow("jobs were left waiting by a stopped local server"),
      () => undefined,
    );
    return new HandingOverWorker(worker, handOff(context, holdLocalServer(socketPath)));
  };
}

interface HandOff {
  /** The first request is out: resolves OpenCode's compactor model and gives it to the server, in the background. */
  begin(): void;
  /** At close: makes sure the server has it (given now if `begin` had not), then lets the server's worker work. */
  end(): Promise<void>;
}

function handOff({ config, model }: CompactorContext, hold: LocalServerHold): HandOff {
  let given: Promise<void> | undefined;
  const give = () => {
    given ??= model.settings().then((settings) =>
      hold.send({
        type: "hand-off",
        config: config.core,
        settings,
        concurrency: config.plugin.embeddedWorkerConcurrency,
      }),
    );
    return given;
  };
  return {
    begin: () => void give().catch(() => undefined),
    end: async () => {
      try {
        await give();
      } finally {
        hold.release();
      }
    },
  };
}

/** The run's own worker, with the hand-off begun at its first request and ended after its stop. */
class HandingOverWorker implements CompactorHandle {
  constructor(
    private readonly worker: EmbeddedWorker,
    private readonly handOff: HandOff,
  ) {}

  get state(): string {
    return this.worker.state;
  }

  get startReason(): string | undefined {
    return this.worker.startReason;
  }

  get error(): string | undefined {
    return this.worker.error;
  }

  onSessionIdle(stillIdle: () => boolean): void {
    this.worker.onSessionIdle(stillIdle);
  }

  onRequest(boundary: number, builtLeaves: () => Promise<number>): Promise<void> {
    return this.worker.onRequest(boundary, builtLeaves);
  }

  onFirstRequestSent(jobsWaiting: () => Promise<boolean>): void {
    this.worker.onFirstRequestSent(jobsWaiting);
    // The local server starting for this process learns its database now that the request is out.
    this.handOff.begin();
  }

  /** The server's worker drains the queue after this process, bounded: OpenCode waits for the close. */
  async stop(): Promise<void> {
    await this.worker.stop();
    await bounded(this.handOff.end(), HAND_OFF_WITHIN_MS).catch(() => undefined);
  }

  released(): Promise<void> {
    return this.worker.released();
  }
}
