// The optchat local server under Node.js (plugin/transport/local-server/entry.ts through tsx, as bin/optchat.mjs runs the CLI):
// `node local-server-node.mjs <socket> <idle seconds>`. plugin/transport/local-server/client.ts starts it so when Node.js 20.6 or
// later is on PATH, because the same served run cost the server ~40-60% of the CPU it cost under OpenCode's Bun
// (docs/opencode-notes.md "The local server on Node.js"), CPU taken from the cores OpenCode itself is using.
import { register } from "tsx/esm/api";

register();
await import("./entry.ts");
