// `npm run build` (and `prepack`, so `npm pack` / `npm publish` always ship fresh code): compiles plugin/ and src/ to
// dist/ (JavaScript and type declarations, tsconfig.build.json) and copies beside them what the compiled code opens by
// a path relative to itself: src/embedded/supervisor.mjs and migrations/ (src/store/migrate.ts reads ../../migrations).
// Plain JavaScript so that it runs before anything is compiled; TypeScript is a dev dependency of the checkout.
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" });
cpSync(join(root, "src", "embedded", "supervisor.mjs"), join(dist, "src", "embedded", "supervisor.mjs"));
cpSync(join(root, "migrations"), join(dist, "migrations"), { recursive: true });
process.stdout.write(`optchat: built ${dist}\n`);
