#!/usr/bin/env node
// The `optchat` command. In the npm package it runs the compiled CLI (dist/, built by `npm run build` before packing;
// the package ships no TypeScript). In a checkout, where src/ holds the sources, it runs them through tsx (a dev
// dependency), so nothing needs building while developing.
import { existsSync } from "node:fs";

const sources = new URL("../src/cli/main.ts", import.meta.url);
let main;
if (existsSync(sources)) {
  const { register } = await import("tsx/esm/api");
  register();
  ({ main } = await import(sources.href));
} else {
  ({ main } = await import("../dist/src/cli/main.js"));
}
process.exitCode = await main(process.argv.slice(2));
