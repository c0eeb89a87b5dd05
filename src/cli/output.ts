import type { Output } from "./command.js";

const closed = { stdout: false, stderr: false };
let guarded = false;

function guard(name: "stdout" | "stderr") {
  return (error: NodeJS.ErrnoException) => {
    if (error.code !== "EPIPE") throw error;
    closed[name] = true;
  };
}

/**
 * stdout/stderr as a command's Output. When the reader of a pipe goes away (`optchat status | head -1`), the next
 * write fails with EPIPE, emitted as an 'error' event that would otherwise crash the process with a stack trace: the
 * rest of the output is dropped instead, as the reader asked, and the command finishes normally (it still closes its
 * database connections).
 */
export function processOutput(json: boolean): Output {
  if (!guarded) {
    // Not conditional on other listeners: tsx's loader pipes into stdout, and its pipe's 'error' listener re-emits
    // the error when it is the only one left.
    process.stdout.on("error", guard("stdout"));
    process.stderr.on("error", guard("stderr"));
    guarded = true;
  }
  return {
    json,
    out: (line) => {
      if (!closed.stdout) process.stdout.write(`${line}\n`);
    },
    err: (line) => {
      if (!closed.stderr) process.stderr.write(`${line}\n`);
    },
  };
}
