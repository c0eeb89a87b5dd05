/** Polls `check` until it returns a value (not undefined) or `timeoutMs` passes; every poll of the tests is this one. */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  what: string | (() => string),
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Polls `check` until it resolves without throwing, or `timeoutMs` passes (then fails with the last error). */
export async function retrying<T>(check: () => Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let last: Error | undefined;
  // Boxed: a check that resolves to undefined (an assertion block) has succeeded.
  const passed = await eventually(
    async () => {
      try {
        return { value: await check() };
      } catch (error) {
        last = error as Error;
        return undefined;
      }
    },
    timeoutMs,
    () => `${what}: ${last?.message}`,
  );
  return passed.value;
}
