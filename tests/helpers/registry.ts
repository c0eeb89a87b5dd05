/**
 * A local npm registry for the install-by-name test (tests/e2e/npm-install.test.ts): Verdaccio (a dev dependency, 6.8.0)
 * on a free loopback port with no uplinks, and what is published into it without network: this checkout packed
 * (`npm pack`, which builds dist/ first) and its production dependency closure plus the closure of any other package
 * named, each packed from the npm cache that `npm ci` filled (`npm pack <name>@<version> --offline`), then published
 * with the registry's publish request (the body `npm publish` sends), so no login is needed.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { basename, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

interface LockEntry {
  readonly version?: string;
  readonly dev?: boolean;
  readonly link?: boolean;
  readonly dependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/** A package installed in the checkout: its name, version and lock path (node_modules/…). */
export interface InstalledPackage {
  readonly name: string;
  readonly version: string;
  readonly path: string;
}

function nameOf(path: string): string {
  return path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
}

/** Where Node would resolve `name` from the package at `from` (a lock path), as npm laid node_modules out. */
function resolveFrom(packages: Record<string, LockEntry>, from: string, name: string): string | undefined {
  let base = from;
  for (;;) {
    const candidate = base ? `${base}/node_modules/${name}` : `node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!base) return undefined;
    const cut = base.lastIndexOf("/node_modules/");
    base = cut < 0 ? "" : base.slice(0, cut);
  }
}

/**
 * The packages a registry must hold to install `roots` (lock paths; "" is the checkout itself, whose dev dependencies
 * are left out): their dependencies, optional ones that are installed here (another platform's binaries are not in
 * the cache, and npm skips an optional dependency the registry lacks) and required peers, transitively.
 */
export function dependencyClosure(checkout: string, roots: readonly string[]): InstalledPackage[] {
  const lock = JSON.parse(readFileSync(join(checkout, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>;
  };
  const found = new Map<string, InstalledPackage>();
  const visit = (path: string): void => {
    const entry = lock.packages[path];
    if (!entry) return;
    if (path !== "") {
      if (found.has(path) || !existsSync(join(checkout, path))) return;
      found.set(path, { name: nameOf(path), version: entry.version ?? "", path });
    }
    const names = [
      ...Object.keys(entry.dependencies ?? {}),
      ...Object.keys(entry.optionalDependencies ?? {}),
      ...Object.keys(entry.peerDependencies ?? {}).filter((name) => !entry.peerDependenciesMeta?.[name]?.optional),
    ];
    for (const name of names) {
      const resolved = resolveFrom(lock.packages, path, name);
      if (resolved) visit(resolved);
    }
  };
  for (const root of roots) visit(root);
  // One of each name@version (npm may have installed the same version at several places).
  const unique = new Map([...found.values()].map((p) => [`${p.name}@${p.version}`, p]));
  return [...unique.values()];
}

/** A free TCP port on 127.0.0.1 (the port is closed again before it is returned). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface LocalRegistry {
  readonly url: string;
  /** Publishes a tarball with its package.json. */
  publish(tarball: string, manifest: Record<string, unknown>): Promise<void>;
  /** Stops Verdaccio (its whole process group) and waits for it to exit. */
  stop(): Promise<void>;
}

/** Starts Verdaccio with its storage under `directory`, no uplinks, anyone may read and publish. */
export async function startRegistry(checkout: string, directory: string): Promise<LocalRegistry> {
  mkdirSync(join(directory, "storage"), { recursive: true });
  const port = await freePort();
  const config = join(directory, "config.yaml");
  writeFileSync(
    config,
    [
      `storage: ${join(directory, "storage")}`,
      "auth:",
      "  htpasswd:",
      `    file: ${join(directory, "htpasswd")}`,
      "uplinks: {}",
      "packages:",
      "  '**':",
      "    access: $all",
      "    publish: $all",
      "max_body_size: 300mb",
      "log: { type: stdout, format: pretty, level: warn }",
      "",
    ].join("\n"),
  );
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    process.execPath,
    [
      join(checkout, "node_modules", "verdaccio", "bin", "verdaccio"),
      "--config",
      config,
      "--listen",
      `127.0.0.1:${port}`,
    ],
    { detached: true, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout?.on("data", (chunk) => {
    output += chunk;
  });
  child.stderr?.on("data", (chunk) => {
    output += chunk;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null && child.pid) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // already gone
      }
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid, "SIGKILL");
      await exited;
    }
  };
  for (let tries = 0; ; tries++) {
    const ok = await fetch(`${url}/-/ping`).then(
      (response) => response.ok,
      () => false,
    );
    if (ok) break;
    if (tries > 150 || child.exitCode !== null) {
      await stop();
      throw new Error(`Verdaccio did not answer on ${url} within 30 s:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return { url, publish: (tarball, manifest) => publishTarball(url, tarball, manifest), stop };
}

/** The request `npm publish` makes: the manifest with its dist, the tarball attached, tagged latest. */
async function publishTarball(registry: string, tarball: string, manifest: Record<string, unknown>): Promise<void> {
  const data = readFileSync(tarball);
  const name = String(manifest.name);
  const version = String(manifest.version);
  const file = `${name.replace(/^@[^/]+\//, "")}-${version}.tgz`;
  const body = {
    _id: name,
    name,
    "dist-tags": { latest: version },
    versions: {
      [version]: {
        ...manifest,
        _id: `${name}@${version}`,
        dist: {
          shasum: createHash("sha1").update(data).digest("hex"),
          integrity: `sha512-${createHash("sha512").update(data).digest("base64")}`,
          tarball: `${registry}/${name}/-/${file}`,
        },
      },
    },
    _attachments: {
      [file]: { content_type: "application/octet-stream", data: data.toString("base64"), length: data.length },
    },
  };
  const address = `${registry}/${name.replace("/", "%2f")}`;
  const put = (url: string, value: object) =>
    fetch(url, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify(value) });
  let response = await put(address, body);
  if (response.status === 409) {
    // Another version is there already: as libnpmpublish does, merge into the current document and put it at its rev.
    const current = (await (await fetch(`${address}?write=true`)).json()) as Record<string, unknown>;
    const merged = {
      ...current,
      versions: { ...(current.versions as object), ...body.versions },
      "dist-tags": { ...(current["dist-tags"] as object), ...body["dist-tags"] },
      _attachments: body._attachments,
    };
    response = await put(`${address}/-rev/${String(current._rev)}`, merged);
  }
  if (!response.ok)
    throw new Error(`publishing ${basename(tarball)} failed: ${response.status} ${await response.text()}`);
}

/**
 * Packs the packages from the npm cache, with no network (`npm pack … --offline`, one command for all), into
 * `destination`; returns each package's tarball path.
 */
export async function packFromCache(
  packages: readonly InstalledPackage[],
  destination: string,
): Promise<Map<InstalledPackage, string>> {
  mkdirSync(destination, { recursive: true });
  const specs = packages.map((p) => `${p.name}@${p.version}`);
  const { stdout } = await run(
    "npm",
    ["pack", ...specs, "--offline", "--ignore-scripts", "--json", "--pack-destination", destination],
    { cwd: destination, maxBuffer: 64 << 20 },
  );
  const packed = JSON.parse(stdout) as Array<{ name: string; version: string; filename: string }>;
  const tarballs = new Map<InstalledPackage, string>();
  for (const p of packages) {
    const entry = packed.find((e) => e.name === p.name && e.version === p.version);
    if (!entry) throw new Error(`npm pack did not pack ${p.name}@${p.version} from the cache`);
    tarballs.set(p, join(destination, entry.filename));
  }
  return tarballs;
}

/** Compares two versions well enough to publish a package's versions oldest first (the last one is `latest`). */
export function versionOrder(a: string, b: string): number {
  return a.localeCompare(b, "en", { numeric: true });
}
