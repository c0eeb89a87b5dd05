/**
 * Work that must not overlap or overtake: each task starts once every task queued before it has settled (resolved or
 * rejected), in the order they were queued. What the session state used to say with promises kept as locks (a field
 * holding "the previous one", awaited by the next) is said with one of these.
 */
export class SerialQueue {
  /** Settles when the last task queued so far has; never rejects. The same promise until another task is queued. */
  private tail: Promise<void> = Promise.resolve();

  /** Queues `task`; its own result (or rejection) is returned, and the queue goes on either way. */
  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.then(noop, noop);
    return result;
  }

  /**
   * Settles once every task queued so far has; never rejects. The same promise while nothing new is queued, so a wait
   * that compares them (plugin/base/closing.ts `settle`) sees when more work arrived.
   */
  idle(): Promise<void> {
    return this.tail;
  }
}

function noop(): void {}
