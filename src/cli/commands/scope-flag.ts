import { OptchatError } from "../../core/errors.js";

/** The --scope value of a scope-level command; INPUT_INVALID naming the flag when it is missing. */
export function requireScope(scope: string | undefined, usage: string): string {
  if (!scope)
    throw new OptchatError("INPUT_INVALID", `--scope is required (e.g. project:<project id>)\nUsage: ${usage}`);
  return scope;
}
