import { OptchatError } from "../core/errors.js";

/** What went wrong with the embedded server; `details.fault` of its EMBEDDED_SERVER error (stable, for tests). */
export type EmbeddedFault =
  | "unsupported"
  | "binaries-missing"
  | "not-writable"
  | "disk-full"
  | "socket-path-too-long"
  | "other-major"
  | "foreign-owner"
  | "socket-collision"
  | "not-a-cluster"
  | "start-failed";

/** One EMBEDDED_SERVER error: what failed (naming the directory) and the fix (naming the setting). */
export function embeddedFault(
  fault: EmbeddedFault,
  what: string,
  fix: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): OptchatError {
  return new OptchatError("EMBEDDED_SERVER", `${what}. Fix: ${fix}.`, { fault, ...details }, { cause });
}

/** The fault a failed system call or server start points at, from its errno code or its log. */
export function faultOfFailure(code: string | undefined, log = ""): EmbeddedFault | undefined {
  if (code === "ENOSPC" || code === "EDQUOT" || /No space left on device|Disk quota exceeded/i.test(log)) {
    return "disk-full";
  }
  if (
    code === "EACCES" ||
    code === "EPERM" ||
    code === "EROFS" ||
    /Permission denied|Read-only file system/i.test(log)
  ) {
    return "not-writable";
  }
  return undefined;
}
