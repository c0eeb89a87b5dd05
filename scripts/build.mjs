// `npm run build` (and `prepack`, so `npm pack` / `npm publish` always ship fresh code): compiles plugin/ and src/ to
// dist/ (JavaScript and type declarations, tsconfig.build.json) and copies beside them what the compiled code opens by
// a path relative to itself: src/embedded/supervisor.mjs and migrations/ (src/store/migrate.ts reads ../../migrations).
// Incremental (tsc's build info in node_modules/.cache/): a full compile costs ~45-100 s of CPU on a busy 2-core
// machine, an unchanged tree a few seconds; compiled files whose source is gone are removed, so dist/ holds exactly
// the sources' output. Plain JavaScript so that it runs before anything is compiled; TypeScript is a dev dependency.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const buildInfo = join(root, "node_modules", ".cache", "optchat-build.tsbuildinfo");
mkdirSync(dirname(buildInfo), { recursive: true });
// Build info without its output (dist/ deleted by hand) would make tsc skip the emit.
if (!existsSync(dist)) rmSync(buildInfo, { force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(
  process.execPath,
  [tsc, "-p", join(root, "tsconfig.build.json"), "--incremental", "--tsBuildInfoFile", buildInfo],
  { stdio: "inherit" },
);
// Output of a source that no longer exists (a module removed or renamed since the last build).
for (const top of ["src", "plugin"]) {
  const walk = (directory) => {
    for (const entry of readdirSync(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) walk(path);
      else {
        const source = join(root, relative(dist, path)).replace(/(\.d\.ts|\.js)$/, ".ts");
        if (/\.(d\.ts|js)$/.test(entry.name) && !existsSync(source)) rmSync(path);
      }
    }
  };
  if (existsSync(join(dist, top))) walk(join(dist, top));
}
cpSync(join(root, "src", "embedded", "supervisor.mjs"), join(dist, "src", "embedded", "supervisor.mjs"));
rmSync(join(dist, "migrations"), { recursive: true, force: true });
cpSync(join(root, "migrations"), join(dist, "migrations"), { recursive: true });
process.stdout.write(`optchat: built ${dist}\n`);
