import { createSummarizer } from "../../compactor/registry.js";
import { summarizerSettingsOf } from "../../memory/config.js";
import { type RebuildReport, rebuild, rebuildDepsOf } from "../../memory/rebuild.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";
import { progressBar } from "../progress.js";
import { withSummarizerFlags } from "./worker.js";

const usage =
  "optchat rebuild [--scope S] [--session X] [--prompt-version V] [--summarizer NAME] [--model NAME] [--url URL] [--progress] [--json]";

export const rebuildCommand: Command = {
  name: "rebuild",
  usage: [usage],
  summary:
    "rebuild summaries with the current compactor as new revisions (another model or prompt version, or labelled\nfallbacks), with everything derived from them, and publish new view revisions",
  details: [
    "Selects the summaries the current compactor would write differently: those of another model or prompt version",
    "and every labelled fallback (with --prompt-version V: only those written with prompt version V). Every summary",
    "derived from a rebuilt one (its parents, a publication's shared line and the shared summaries above it) is",
    "rebuilt too. Old revisions stay: a snapshot pinned earlier keeps reading exactly what it pinned; new requests",
    'read the new views. One commit: an interruption changes nothing (docs/compactor.md "Revisions and rebuild").',
    "--scope S          only the sessions of scope S and its shared tree (see `optchat scopes`)",
    "--session X        only session X (an optchat or OpenCode session id) and the shared lines derived from it",
    "--prompt-version V only summaries written with prompt version V",
    "--summarizer, --model, --url  the compactor to rebuild with, as for `optchat worker` (else the settings')",
    "--progress         a progress line on stderr even when it is not a terminal",
    "Model calls go to the cost ledger and count against the budget caps; past a cap the rebuild stops and changes",
    "nothing. Exit code 0 (also when nothing needed a rebuild).",
  ].join("\n"),
  async run(args, ctx) {
    const { values } = parseCommand(
      args,
      {
        scope: { type: "string" },
        session: { type: "string" },
        "prompt-version": { type: "string" },
        summarizer: { type: "string" },
        model: { type: "string" },
        url: { type: "string" },
        progress: { type: "boolean" },
      },
      0,
      usage,
    );
    const { output } = ctx;
    const config = withSummarizerFlags(ctx.config, values, usage);
    const summarizer = await createSummarizer(summarizerSettingsOf(config));
    const bar = progressBar({
      format: "rebuild [{bar}] {value}/{total} summaries examined",
      total: 0,
      forced: values.progress === true,
      json: output.json,
    });
    let report: RebuildReport;
    try {
      report = await withMemory(config, "optchat-rebuild", async (memory) => {
        const session = values.session === undefined ? undefined : await resolveSession(memory, values.session);
        return await rebuild(
          rebuildDepsOf(memory.pool, config, summarizer),
          {
            ...(values.scope !== undefined ? { scopeId: values.scope } : {}),
            ...(session ? { sessionId: session.sessionId } : {}),
            ...(values["prompt-version"] !== undefined ? { promptVersion: values["prompt-version"] } : {}),
          },
          {
            onProgress: (done, total) => {
              bar.setTotal(total);
              bar.update(done);
            },
            onStep: (line) => {
              if (!output.json) output.err(line);
            },
          },
        );
      });
    } finally {
      bar.stop();
    }
    if (output.json) output.out(JSON.stringify({ ok: true, ...report }));
    else for (const line of describe(report)) output.out(line);
    return 0;
  },
};

function describe(report: RebuildReport): string[] {
  if (report.revisions === 0)
    return [`nothing to rebuild: every selected summary is current (${report.summarizer}, ${report.promptVersion})`];
  return [
    `rebuilt ${report.revisions} summaries as new revisions with ${report.summarizer} (${report.promptVersion}): ${report.fallbacksReplaced} fallback(s) replaced, ${report.calls} model call(s)`,
    ...report.trees.map((t) => `  ${t.label}  ${t.revisions} revision(s), view revision ${t.viewRevision}`),
  ];
}
