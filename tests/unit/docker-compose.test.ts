import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { SETTINGS } from "../../src/memory/config.js";
import { ROOT } from "../helpers.js";

/**
 * docker-compose.yml against what the docs (docs/cli.md, docs/configuration.md) and the code say (issue 12 item 6). There is no Docker engine here to
 * run it, so the file is parsed and every setting it relies on is checked: `docker compose up -d` starts PostgreSQL
 * and the worker, with the credentials the README tells users to put in DATABASE_URL, and only documented settings.
 */

const read = (file: string) => readFileSync(join(ROOT, file), "utf8");
const compose = parse(read("docker-compose.yml"));
// The set-up commands and the settings moved from the README to docs/ (issue 40): the README links both.
const readme = read("docs/cli.md");
const configuration = read("docs/configuration.md");
const dockerfile = read("Dockerfile");

/** `${NAME:-default}` → its default; a plain value as it is. */
function composeDefault(value: string): string {
  return value.replace(/\$\{[A-Z0-9_]+:-([^}]*)\}/g, "$1");
}

describe("docker-compose.yml", () => {
  const { db, worker } = compose.services;

  it("starts PostgreSQL and the worker with a plain `docker compose up -d` (no profiles)", () => {
    expect(Object.keys(compose.services).sort()).toEqual(["db", "worker"]);
    expect(db.profiles).toBeUndefined();
    expect(worker.profiles).toBeUndefined();
    expect(readme).toContain("docker compose up -d");
  });

  it("serves the database the README's DATABASE_URL names, on localhost only", () => {
    const [documented] = readme.match(/DATABASE_URL=postgres:\/\/postgres:[^@\s]+@127\.0\.0\.1:5432\/\w+/) ?? [];
    expect(documented, "the README gives the compose database's DATABASE_URL").toBeDefined();
    const url = new URL((documented as string).slice("DATABASE_URL=".length));
    expect(db.environment).toMatchObject({
      POSTGRES_USER: url.username,
      POSTGRES_PASSWORD: url.password,
      POSTGRES_DB: url.pathname.slice(1),
    });
    expect(db.ports).toEqual([`127.0.0.1:${url.port}:5432`]);
    expect(db.healthcheck.test).toEqual(["CMD", "pg_isready", "-U", url.username, "-d", url.pathname.slice(1)]);
    // The same major version the tests' throwaway container uses.
    expect(read("tests/global-setup.ts")).toContain(`new GenericContainer("${db.image}")`);
  });

  it("points the worker at that database once it is healthy, and migrates before working", () => {
    const url = new URL(worker.environment.DATABASE_URL);
    expect(url.hostname).toBe("db");
    expect(url.port).toBe("5432");
    expect([url.username, url.password, url.pathname.slice(1)]).toEqual([
      db.environment.POSTGRES_USER,
      db.environment.POSTGRES_PASSWORD,
      db.environment.POSTGRES_DB,
    ]);
    expect(worker.depends_on).toEqual({ db: { condition: "service_healthy" } });
    expect(worker.command.join(" ")).toMatch(/optchat\.mjs migrate && exec node bin\/optchat\.mjs worker$/);
    // `optchat worker` waits up to 30 s for running jobs after SIGTERM (src/cli/commands/worker.ts).
    expect(read("src/cli/commands/worker.ts")).toContain("worker.stop(30_000)");
    expect(Number.parseInt(worker.stop_grace_period, 10)).toBeGreaterThan(30);
  });

  it("passes only documented settings, with the code's defaults", () => {
    const byEnv = new Map<string, { default: unknown }>(Object.values(SETTINGS).map((s) => [s.env, s]));
    for (const [name, value] of Object.entries(worker.environment as Record<string, string>)) {
      const setting = byEnv.get(name);
      expect(setting, `${name} is a setting of src/memory/config.ts`).toBeDefined();
      expect(configuration, `${name} is in docs/configuration.md`).toContain(`| \`${name}\` |`);
      if (name !== "DATABASE_URL") expect(composeDefault(value), name).toBe(String(setting?.default));
    }
  });

  it("builds the worker from this checkout on the Node the project supports, with what the CLI imports", () => {
    expect(worker.build).toBe(".");
    expect(existsSync(join(ROOT, "Dockerfile"))).toBe(true);
    const [, major] = dockerfile.match(/^FROM node:(\d+)[-.\w]*$/m) ?? [];
    const engines = JSON.parse(read("package.json")).engines.node as string;
    expect(Number(major)).toBeGreaterThanOrEqual(Number(engines.match(/\d+/)?.[0]));
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    for (const dir of ["bin", "src", "plugin", "migrations"]) expect(dockerfile).toContain(`COPY ${dir} ./${dir}`);
    // The image installs its own dependencies: the host's node_modules (maybe another platform's) stays out.
    expect(read(".dockerignore").split("\n")).toContain("node_modules");
  });
});
