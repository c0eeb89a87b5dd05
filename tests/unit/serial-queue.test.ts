import { describe, expect, it } from "vitest";
import { SerialQueue } from "../../plugin/base/serial-queue.js";

/** The session state's queue (plugin/base/serial-queue.ts): what promises kept as locks used to say. */
describe("SerialQueue", () => {
  it("starts each task after every earlier one settled, in the order queued, a failure not stopping the rest", async () => {
    const queue = new SerialQueue();
    const events: string[] = [];
    let releaseFirst!: () => void;
    const first = queue.run(async () => {
      events.push("first start");
      await new Promise<void>((resolve) => {
        releaseFirst = resolve;
      });
      events.push("first end");
      return 1;
    });
    const second = queue.run(async () => {
      events.push("second");
      throw new Error("second failed");
    });
    const third = queue.run(async () => {
      events.push("third");
      return 3;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(events).toEqual(["first start"]);
    releaseFirst();
    await expect(first).resolves.toBe(1);
    await expect(second).rejects.toThrow("second failed");
    await expect(third).resolves.toBe(3);
    expect(events).toEqual(["first start", "first end", "second", "third"]);
  });

  it("gives the same idle promise until more work is queued, and it never rejects", async () => {
    const queue = new SerialQueue();
    const idle = queue.idle();
    expect(queue.idle()).toBe(idle);
    void queue
      .run(async () => {
        throw new Error("failed");
      })
      .catch(() => {});
    const after = queue.idle();
    expect(after).not.toBe(idle);
    expect(queue.idle()).toBe(after);
    await expect(after).resolves.toBeUndefined();
  });
});
