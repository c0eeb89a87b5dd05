import { resolveSession } from "../../memory/resolve-session.js";
import { viewAsText } from "../../memory/views.js";
import { type Command, integerFlag, parseCommand, withMemory } from "../command.js";
import { describeView } from "../render.js";

const usage = "optchat view <session> [--budget BYTES] [--json]";

export const viewCommand: Command = {
  name: "view",
  usage: [usage],
  summary: "the session's view as a model sees it: start+count|text lines",
  details: `--budget BYTES   the view projected to fit BYTES, as a request with that much room would read it.
Exit code 0, or 3 when the view cannot fit --budget (the smallest cover is larger; stderr says how large).`,
  async run(args, { config, output }) {
    const { values, positionals } = parseCommand(args, { budget: { type: "string" } }, 1, usage);
    const budget = integerFlag(values.budget, "budget", 1, 100_000_000);
    const view = await withMemory(config, "optchat-cli", async (memory) => {
      const session = await resolveSession(memory, positionals[0] as string);
      return await memory.view(session.sessionId, budget === undefined ? {} : { budget });
    });
    if (output.json) output.out(JSON.stringify({ ok: true, ...view }));
    else {
      output.out(viewAsText(view));
      output.err(describeView(view));
    }
    return view.projection && !view.projection.fits ? 3 : 0;
  },
};
