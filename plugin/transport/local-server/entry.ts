/**
 * The optchat local server's process (plugin/transport/local-server/server.ts), started detached by plugin/transport/local-server/client.ts as
 * `node local-server-node.mjs <socket> <idle seconds>` (which loads this module through tsx) when Node.js 20.6 or later
 * is on PATH, else as `<OpenCode's binary, as Bun> local-server-entry.ts <socket> <idle seconds>`; its output is
 * appended to its log.
 */
import { unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { recordServerPid, startLocalServer, waitForPredecessor } from "./server.js";

const log = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);
const describe = (error: unknown) => (error instanceof Error ? (error.stack ?? error.message) : String(error));
// As in the plugin's thread: one connection's unexpected error must not end the server for every process.
process.on("unhandledRejection", (reason) => log(`optchat local server: unhandled rejection: ${describe(reason)}`));
process.on("uncaughtException", (error) => log(`optchat local server: uncaught exception: ${describe(error)}`));

const [socketPath, idleSeconds] = process.argv.slice(2);
if (!socketPath) {
  log("optchat local server: usage: local-server-entry.ts <socket path> [idle seconds]");
  process.exit(2);
}
// This module is plugin/transport/local-server/entry.ts: the code roots are plugin/ and src/.
const pluginDirectory = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
await waitForPredecessor(socketPath, log);
const server = await startLocalServer({
  socketPath,
  idleMs: Math.max(1, Number(idleSeconds) || 300) * 1000,
  codeRoots: [pluginDirectory, join(pluginDirectory, "..", "src")],
  log,
}).catch((error: unknown) => {
  // Never left running half-started (its file watchers alone kept one alive for good, seen after a test run).
  log(`optchat local server: could not start: ${describe(error)}`);
  process.exit(1);
});
if (!server) {
  log(`optchat local server: another server already listens on ${socketPath}`);
  process.exit(0);
}
await recordServerPid(socketPath);
// The start is done: the next process that finds no server may start one again (plugin/transport/local-server/client.ts).
await unlink(socketPath.replace(/\.sock$/, ".starting")).catch(() => undefined);
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const)
  process.on(signal, () => void server.stop(`signal ${signal}`));
log(`optchat local server: stopped: ${await server.stopped}`);
process.exit(0);
