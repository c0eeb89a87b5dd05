import { startBrowseServer } from "../../browse/server.js";
import { OptchatError } from "../../core/errors.js";
import { createBrowseModel } from "../../memory/browse.js";
import { budgetSettingsOf } from "../../memory/config.js";
import { type Command, integerFlag, parseCommand, withMemory } from "../command.js";
import { opencodeTitles } from "../labels.js";
import { openOpencodeStorage, scopeLocations } from "../opencode.js";

/** Each project scope's directory and git remote from OpenCode's storage; none when it is not at the default place. */
async function projectLocations() {
  try {
    return await scopeLocations(openOpencodeStorage());
  } catch {
    return new Map();
  }
}

const usage = "optchat browse [--port N] [--host 127.0.0.1] [--json]";

export const browseCommand: Command = {
  name: "browse",
  usage: [usage],
  summary: "a local, read-only web UI of the whole memory; prints the address to open (docs/browse.md)",
  details: `Serves until SIGINT/SIGTERM. The printed address carries a random token made for this run; requests
without it get 403 (after the first visit it is kept in a cookie). The token is printed once, on stdout, and logged
nowhere else.
  --port N   the port to listen on (default 0: any free one)
  --host H   a loopback address to listen on (default 127.0.0.1; ::1 also works): never another interface`,
  async run(args, { config, output }) {
    const { values } = parseCommand(args, { port: { type: "string" }, host: { type: "string" } }, 0, usage);
    const port = integerFlag(values.port, "port", 0, 65535) ?? 0;
    const host = values.host ?? "127.0.0.1";
    if (host === "") throw new OptchatError("INPUT_INVALID", `--host must not be empty\nUsage: ${usage}`);
    return await withMemory(
      config,
      "optchat-browse",
      async (memory) => {
        const model = createBrowseModel(memory, budgetSettingsOf(config), {
          databaseUrl: config.databaseUrl,
          locations: () => projectLocations(),
          titles: () => opencodeTitles(),
        });
        const server = await startBrowseServer(model, { host, port });
        if (output.json)
          output.out(JSON.stringify({ ok: true, url: server.url, host: server.host, port: server.port }));
        else {
          output.out(server.url);
          output.err("optchat browse: read-only; open the address above (it holds this run's token). Ctrl-C stops it.");
        }
        await new Promise<void>((resolve) => {
          process.once("SIGTERM", resolve);
          process.once("SIGINT", resolve);
        });
        await server.close();
        return 0;
      },
      { readOnly: true },
    );
  },
};
