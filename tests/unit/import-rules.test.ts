import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { arrowViolations, cycles, listImports, sizeProblems, sizeViolations } from "../../scripts/import-rules.js";

const ROOT = join(import.meta.dirname, "..", "..");

/** The layers of docs/architecture.md "Layers", checked on the imports themselves (scripts/import-rules.ts). */
describe("import rules", () => {
  const edges = listImports(ROOT);

  it("finds the imports (a parser that finds none would pass everything)", () => {
    expect(edges.length).toBeGreaterThan(500);
    expect(edges).toContainEqual({ from: "plugin/index.ts", to: "plugin/transport/remote-hooks.ts", typeOnly: false });
  });

  it("follows every layer arrow", () => {
    expect(arrowViolations(edges)).toEqual([]);
  });

  it("has no cycle of run-time imports", () => {
    expect(cycles(edges)).toEqual([]);
  });

  it("keeps every module within 400 lines and every function within 60, or says why at its top", () => {
    expect(sizeViolations(ROOT)).toEqual([]);
    const long = `export function f() {\n${"  g();\n".repeat(61)}}\n`;
    expect(sizeProblems("x.ts", long)).toEqual(["x.ts:1: a function of 63 lines"]);
    expect(sizeProblems("x.ts", `// size: one table of hooks.\n${long}`)).toEqual([]);
  });

  it("catches a wrong arrow and a cycle", () => {
    const wrong = [
      { from: "plugin/base/clock.ts", to: "plugin/host/adapter.ts", typeOnly: true },
      { from: "src/core/a.ts", to: "src/core/b.ts", typeOnly: false },
      { from: "src/core/b.ts", to: "src/core/a.ts", typeOnly: false },
    ];
    expect(arrowViolations(wrong)).toHaveLength(1);
    expect(cycles(wrong)).toEqual(["src/core/a.ts → src/core/b.ts → src/core/a.ts"]);
  });
});
