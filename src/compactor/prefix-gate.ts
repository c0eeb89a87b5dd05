/**
 * Orders a worker's concurrent calls of one tree so that each finds the previous one's prefix in the provider's cache
 * (issue 13 item 3). A provider writes a cache entry only once a request's answer has begun (Anthropic documents
 * this), so two calls sent together with the same `<chat>` context (a node commit often readies the next leaf and a
 * parent, whose contexts are the same lines) both pay to write it. A call therefore waits until the previous call of
 * its tree has started answering, for at most `maxWaitMs` (the next turn waits on the compactor; a slow provider must
 * not serialize a tree's calls for long). Calls of different trees never wait for each other.
 */
export interface PrefixGate {
  /** Waits for the tree's previous call to start answering; returns the function that says this one has. */
  enter(key: string): Promise<() => void>;
}

export const PREFIX_WAIT_MS = 3_000;

export function createPrefixGate(maxWaitMs = PREFIX_WAIT_MS): PrefixGate {
  const last = new Map<string, Promise<void>>();
  return {
    async enter(key) {
      const ahead = last.get(key);
      let release = () => {};
      const answered = new Promise<void>((resolve) => {
        release = resolve;
      });
      last.set(key, answered);
      void answered.then(() => {
        if (last.get(key) === answered) last.delete(key);
      });
      if (ahead) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const waited = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, maxWaitMs);
        });
        await Promise.race([ahead, waited]);
        clearTimeout(timer);
      }
      return release;
    },
  };
}
