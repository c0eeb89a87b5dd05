import type { BenchContext } from "./common.js";

export async function runLocomoBench(_context: BenchContext): Promise<void> {}
