import { createHash } from "node:crypto";
import { isAbsolute, join, resolve } from "node:path";

/** The embedded server's socket file name: PostgreSQL names it after the port, even with TCP off. */
export const SOCKET_FILE = ".s.PGSQL.5432";
/** sun_path holds 108 bytes on Linux, 104 on macOS, the terminating NUL included: 103 is safe on both. */
export const MAX_SOCKET_PATH_BYTES = 103;
/** The database optchat keeps its memory in, on the embedded server. */
export const EMBEDDED_DATABASE = "optchat";

/** Where the embedded server lives: resolved once into the Config (src/memory/config.ts). */
export interface EmbeddedSettings {
  /** OPTCHAT_DATA_DIR: the server's files (cluster, log, lock, supervisor's pid). */
  readonly dataDir: string;
  /** The PostgreSQL cluster itself (`initdb` output): <dataDir>/postgres. */
  readonly clusterDir: string;
  /** OPTCHAT_SOCKET_DIR: the directory of the Unix socket (mode 0700), the only way in. */
  readonly socketDir: string;
  /** OPTCHAT_EMBEDDED_IDLE_SECONDS: the server stops after this long with no client connected. */
  readonly idleSeconds: number;
}

export interface PlatformFacts {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly platform: NodeJS.Platform;
  readonly uid: number;
  readonly home: string;
}

/**
 * The default data directory: $XDG_DATA_HOME/optchat or ~/.local/share/optchat on Linux, ~/Library/Application
 * Support/optchat on macOS. As root the server runs as user postgres, which cannot enter /root (mode 0700), so root's
 * default is /var/lib/optchat.
 */
export function defaultDataDir(facts: PlatformFacts): string {
  if (facts.uid === 0) return "/var/lib/optchat";
  if (facts.platform === "darwin") return join(facts.home, "Library", "Application Support", "optchat");
  const xdg = facts.env.XDG_DATA_HOME;
  return join(xdg && isAbsolute(xdg) ? xdg : join(facts.home, ".local", "share"), "optchat");
}

/**
 * The default socket directory: short (a Unix socket path must fit in ~100 bytes), private to the user, and one per
 * data directory so that two data directories never share a server: $XDG_RUNTIME_DIR/optchat-<tag> where that exists
 * (Linux desktops; not as root), else /tmp/optchat-<uid>-<tag> (macOS's $TMPDIR is too long). <tag> is a hash of the
 * data directory.
 */
export function defaultSocketDir(facts: PlatformFacts, dataDir: string): string {
  const tag = createHash("sha256").update(resolve(dataDir)).digest("hex").slice(0, 8);
  const runtime = facts.env.XDG_RUNTIME_DIR;
  if (facts.uid !== 0 && facts.platform !== "darwin" && runtime && isAbsolute(runtime)) {
    return join(runtime, `optchat-${tag}`);
  }
  return join("/tmp", `optchat-${facts.uid}-${tag}`);
}

export function socketPathOf(socketDir: string): string {
  return join(socketDir, SOCKET_FILE);
}

/** The connection URL of the embedded server's optchat database: user postgres over the socket, no TCP. */
export function embeddedUrl(socketDir: string, database = EMBEDDED_DATABASE): string {
  return `postgres://postgres@localhost/${database}?host=${encodeURIComponent(socketDir)}`;
}

/** The socket directory of a URL that names one (`?host=/dir`), else undefined. */
export function socketDirOfUrl(url: string): string | undefined {
  try {
    const host = new URL(url).searchParams.get("host");
    return host?.startsWith("/") ? host : undefined;
  } catch {
    return undefined;
  }
}

/** Resolves the embedded server's settings from the three settings (empty: the defaults above). */
export function embeddedSettings(
  facts: PlatformFacts,
  settings: { dataDir: string; socketDir: string; idleSeconds: number },
): EmbeddedSettings {
  const dataDir = resolve(settings.dataDir === "" ? defaultDataDir(facts) : settings.dataDir);
  const socketDir = resolve(settings.socketDir === "" ? defaultSocketDir(facts, dataDir) : settings.socketDir);
  return Object.freeze({
    dataDir,
    clusterDir: join(dataDir, "postgres"),
    socketDir,
    idleSeconds: settings.idleSeconds,
  });
}
