/**
 * A profiling wrapper around the optchat plugin, for one real `opencode run` (docs/opencode-notes.md "What
 * `opencode run` pays for the plugin"). OpenCode's compiled binary ignores Bun's `--cpu-prof` for its own process, but
 * a plugin can start JavaScriptCore's sampling profiler (`bun:jsc`) itself: this module starts it, imports the plugin
 * (OPTCHAT_PROFILE_TARGET, default this checkout's plugin/index.ts), wraps its hooks to mark when each ran, and at the
 * end of `dispose` writes OPTCHAT_PROFILE_OUT (default optchat-profile-<pid>.json in the temp directory): the samples
 * (1 ms apart, while JavaScript runs) counted as the plugin's when a frame's source is the plugin's code or one of its
 * dependencies, by phase (import, then the hook last entered) and by innermost plugin function, next to OpenCode's.
 *
 * The sampler also stamps some idle time with the last stack it saw (a one-row query's callback in a background pass
 * got 19 samples): compare runs of two plugin versions rather than reading one function's count as its CPU time.
 *
 * The sampler sees only the thread it runs in (OpenCode's): with the plugin in its own thread (the default since
 * docs/opencode-notes.md "The plugin's thread") it shows what OpenCode's thread still does for the plugin; set
 * OPTCHAT_PLUGIN_THREAD=off to sample the plugin's own work as before.
 *
 * Use: point the `plugin` entry of an OpenCode config at this file instead of plugin/index.ts (same options), run
 * `opencode run` once, read the file. Only plugin functions are exported (OpenCode refuses a module exporting anything
 * else).
 */

// @ts-expect-error bun:jsc exists only in Bun (OpenCode runs plugins in its own Bun).
import { samplingProfilerStackTraces, startSamplingProfiler } from "bun:jsc";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

interface Frame {
  readonly name: string;
  readonly sourceURL?: string;
}
interface Trace {
  readonly timestamp: number;
  readonly frames: readonly Frame[];
}

startSamplingProfiler();
const marks: [string, number][] = [["load", performance.now()]];
const target = process.env.OPTCHAT_PROFILE_TARGET ?? new URL("../plugin/index.ts", import.meta.url).pathname;
const plugin = (await import(target)) as { OptchatPlugin: (input: unknown, options: unknown) => Promise<object> };
marks.push(["imported", performance.now()]);
const root = new URL("..", import.meta.url).pathname;

/** The plugin's own source or one of its dependencies (OpenCode's bundle lives under /$bunfs). */
function pluginFrame(frames: readonly Frame[]): Frame | undefined {
  return frames.find((f) => f.sourceURL?.startsWith(root) || f.sourceURL?.includes("/node_modules/"));
}

function summarize(traces: readonly Trace[]): Record<string, unknown> {
  const origin = (traces[0]?.timestamp ?? 0) * 1000 - (marks[0]?.[1] ?? 0);
  const phases: Record<string, number> = {};
  const functions: Record<string, number> = {};
  let opencode = 0;
  for (const trace of traces) {
    const frame = pluginFrame(trace.frames);
    if (!frame) {
      opencode += 1;
      continue;
    }
    const at = trace.timestamp * 1000 - origin;
    const phase = marks.filter(([, t]) => t <= at).at(-1)?.[0] ?? "load";
    phases[phase] = (phases[phase] ?? 0) + 1;
    const where = `${(frame.sourceURL ?? "").replace(root, "").replace(/.*node_modules\//, "")}:${frame.name}`;
    functions[where] = (functions[where] ?? 0) + 1;
  }
  const top = Object.entries(functions)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 40);
  return { samples: traces.length, opencode, plugin: traces.length - opencode, phases, top };
}

export const OptchatProfiledPlugin = async (input: unknown, options: unknown): Promise<object> => {
  const hooks = (await plugin.OptchatPlugin(input, options)) as Record<string, unknown>;
  const wrapped: Record<string, unknown> = { ...hooks };
  for (const [name, hook] of Object.entries(hooks)) {
    if (typeof hook !== "function") continue;
    wrapped[name] = async (...args: unknown[]) => {
      marks.push([name, performance.now()]);
      try {
        return await hook(...args);
      } finally {
        marks.push([`after ${name}`, performance.now()]);
        if (name === "dispose") {
          const out = process.env.OPTCHAT_PROFILE_OUT ?? join(tmpdir(), `optchat-profile-${process.pid}.json`);
          const { traces } = samplingProfilerStackTraces() as { traces: Trace[] };
          writeFileSync(out, JSON.stringify({ marks, ...summarize(traces) }, null, 1));
        }
      }
    };
  }
  return wrapped;
};
