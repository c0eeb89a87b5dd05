// Ctrl-C in the middle of a long import (issue 40 item 9). Both imports are safe to repeat (every record carries its
// finalization key, every session its host id), so the honest message is to run the command again; the progress line
// is ended first so that the message does not land in it.

/** Until `release()`, SIGINT and SIGTERM end the process with code 130/143 after `clear()` and the message. */
export function interruptible(
  what: string,
  clear: () => void,
  write: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
) {
  const handler = (signal: NodeJS.Signals) => {
    clear();
    write(`optchat: ${what} interrupted; run the same command again to continue (nothing is stored twice)`);
    process.exit(signal === "SIGINT" ? 130 : 143);
  };
  process.once("SIGINT", handler);
  process.once("SIGTERM", handler);
  return {
    release(): void {
      process.off("SIGINT", handler);
      process.off("SIGTERM", handler);
    },
  };
}
