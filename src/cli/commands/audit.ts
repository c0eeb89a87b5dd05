import { type Command, parseCommand, withMemory } from "../command.js";

const usage = "optchat audit [--json]";

export const auditCommand: Command = {
  name: "audit",
  usage: [usage],
  summary: "check publications, snapshots, views and reachability; exit 1 on a violation",
  async run(args, { config, output }) {
    parseCommand(args, {}, 0, usage);
    const report = await withMemory(config, "optchat-audit", (memory) => memory.audit());
    if (output.json) output.out(JSON.stringify(report));
    else {
      for (const v of report.violations) output.out(`${v.audit}: ${v.subject}: ${v.problem}`);
      output.out(
        report.ok ? `ok: every audit passed (${report.trees} trees)` : `${report.violations.length} violation(s)`,
      );
    }
    return report.ok ? 0 : 1;
  },
};
