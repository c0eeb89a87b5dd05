#!/usr/bin/env node
// The `optchat` command. The sources are TypeScript, run through tsx (a runtime dependency), so nothing is built first.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../src/cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
