/**
 * The adapter's compactor worker, whatever runs it: the embedded worker of this process (plugin/host/embedded-worker.ts),
 * the local server's for the processes it serves (plugin/transport/local-server/served-worker.ts), or this process's
 * with its queue handed to a local server at close (plugin/transport/local-server/hand-off.ts). Here, below the turns'
 * parts, which tell it when a session went idle (plugin/turns/outcomes.ts).
 */
export interface CompactorHandle {
  readonly state: string;
  readonly startReason: string | undefined;
  readonly error: string | undefined;
  onSessionIdle(stillIdle: () => boolean): void;
  onRequest(boundary: number, builtLeaves: () => Promise<number>): Promise<void>;
  onFirstRequestSent(jobsWaiting: () => Promise<boolean>): void;
  /** Stops at once (never waits for a start under way). */
  stop(): Promise<void>;
  /** Resolves once no worker of this handle uses the memory service's pool any more (it may then be closed). */
  released(): Promise<void>;
}
