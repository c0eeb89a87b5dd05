/**
 * The import rules of docs/architecture.md "Layers", checked on the source: every relative import of src/ and plugin/
 * is listed (static, `export … from`, dynamic `import()`, type-only ones too: a type is a dependency of the design),
 * and each must follow an arrow of the rules below; no cycle of imports between modules. `npm test` runs it through
 * tests/unit/import-rules.test.ts; `node --import tsx scripts/import-rules.ts` prints what it finds. Also the size rule
 * (docs/architecture.md "Layers"): a module over 400 lines, or with a function over 60, says why in a `// size: …`
 * line among its first lines.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

/**
 * A module's layer: the first rule whose prefix its path starts with. `may` lists the layers it may import (its own is
 * always allowed). The plugin's layers go one way: index → transport → host → tools → request → turns → opencode →
 * base, and the plugin reaches the rest of optchat only through src/memory/index.ts.
 */
export const LAYERS: readonly { readonly layer: string; readonly prefix: string; readonly may: readonly string[] }[] = [
  { layer: "src/core", prefix: "src/core/", may: [] },
  { layer: "src/store", prefix: "src/store/", may: ["src/core"] },
  { layer: "src/compactor", prefix: "src/compactor/", may: ["src/store", "src/core"] },
  { layer: "src/embedded", prefix: "src/embedded/", may: ["src/core"] },
  { layer: "src/memory", prefix: "src/memory/", may: ["src/compactor", "src/store", "src/core", "src/embedded"] },
  // The browser reads two store queries of its own (src/store/browse.ts, sessions.ts) besides the service.
  { layer: "src/browse", prefix: "src/browse/", may: ["src/memory", "src/store", "src/core"] },
  {
    layer: "src/cli",
    prefix: "src/cli/",
    // `optchat db` runs the embedded server; the summarizers' registry names the models `worker` and `doctor` accept.
    may: ["src/memory", "src/core", "src/browse", "src/embedded", "src/compactor/registry", "plugin/opencode/index"],
  },
  // The accepted texts of settings are said by one zod-free module, which OpenCode's thread may load.
  { layer: "plugin/base", prefix: "plugin/base/", may: ["src/memory/index", "src/memory/setting-text"] },
  { layer: "plugin/opencode/index", prefix: "plugin/opencode/index.ts", may: ["plugin/opencode", "plugin/base"] },
  { layer: "plugin/opencode", prefix: "plugin/opencode/", may: ["plugin/base", "src/memory/index"] },
  { layer: "plugin/turns", prefix: "plugin/turns/", may: ["plugin/opencode", "plugin/base", "src/memory/index"] },
  {
    layer: "plugin/request",
    prefix: "plugin/request/",
    may: ["plugin/turns", "plugin/opencode", "plugin/base", "src/memory/index"],
  },
  {
    layer: "plugin/tools",
    prefix: "plugin/tools/",
    may: ["plugin/request", "plugin/turns", "plugin/opencode", "plugin/base", "src/memory/index"],
  },
  {
    layer: "plugin/host",
    prefix: "plugin/host/",
    may: ["plugin/tools", "plugin/request", "plugin/turns", "plugin/opencode", "plugin/base", "src/memory/index"],
  },
  {
    layer: "plugin/transport",
    prefix: "plugin/transport/",
    may: [
      ...["plugin/host", "plugin/tools", "plugin/request", "plugin/turns", "plugin/opencode", "plugin/base"],
      "src/memory/index",
    ],
  },
  { layer: "plugin/index", prefix: "plugin/index.ts", may: ["plugin/transport"] },
  // The OpenCode V2 host: V1's tools and memory message over the same service; nothing of V1's transport or host.
  {
    layer: "plugin/v2",
    prefix: "plugin/v2/",
    may: ["plugin/tools", "plugin/request", "plugin/turns", "plugin/opencode", "plugin/base", "src/memory/index"],
  },
];

/**
 * Modules that a layer outside their folder may be allowed alone (a front door): named by themselves, and belonging to
 * their folder's layer for everyone else.
 */
const FRONT_DOORS: Readonly<Record<string, { readonly name: string; readonly folder: string }>> = {
  "src/memory/index.ts": { name: "src/memory/index", folder: "src/memory" },
  "src/compactor/registry.ts": { name: "src/compactor/registry", folder: "src/compactor" },
  "src/memory/setting-text.ts": { name: "src/memory/setting-text", folder: "src/memory" },
};

export function layerOf(path: string): string | undefined {
  return FRONT_DOORS[path]?.name ?? LAYERS.find((rule) => path.startsWith(rule.prefix))?.layer;
}

/** May a module of layer `from` import one of layer `to`? */
export function allowed(from: string, to: string): boolean {
  if (from === to) return true;
  const rule = LAYERS.find((r) => r.layer === from);
  if (!rule) return true;
  if (rule.may.includes(to)) return true;
  const door = Object.values(FRONT_DOORS).find((d) => d.name === to);
  return door !== undefined && (from === door.folder || rule.may.includes(door.folder));
}

const IMPORT =
  /(?:^|\n)\s*((?:import|export)\s[^;]*?\sfrom)\s*["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g;

export interface ImportEdge {
  readonly from: string;
  readonly to: string;
  /** `import type`, or every name imported as a type: gone at run time. */
  readonly typeOnly: boolean;
}

/** Whether an `import … from` statement's head imports only types (`import type`, or `{ type a, type b }` alone). */
function typeOnly(head: string | undefined): boolean {
  if (!head) return false;
  if (/^(import|export)\s+type\s/.test(head)) return true;
  const names = /^(?:import|export)\s+\{([^}]*)\}\s*from$/.exec(head.trim())?.[1];
  const list = (names ?? "")
    .split(",")
    .map((name) => name.trim())
    .filter(Boolean);
  return list.length > 0 && list.every((name) => name.startsWith("type "));
}

/** Every relative import between modules under `folders` (paths relative to `root`, `.js` read as `.ts`). */
export function listImports(root: string, folders: readonly string[] = ["src", "plugin"]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  const visit = (directory: string): void => {
    for (const entry of readdirSync(join(root, directory), { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) visit(path);
      else if (/\.(ts|mjs)$/.test(entry.name)) {
        const text = readFileSync(join(root, path), "utf8");
        for (const match of text.matchAll(IMPORT)) {
          const spec = match[2] ?? match[3] ?? "";
          const target = relative(root, resolve(root, dirname(path), spec)).replace(/\.js$/, ".ts");
          edges.push({ from: path, to: target, typeOnly: typeOnly(match[1]) });
        }
      }
    }
  };
  for (const folder of folders) visit(folder);
  return edges;
}

/** The imports that break a layer arrow, as `from → to (layer → layer)`. */
export function arrowViolations(edges: readonly ImportEdge[]): string[] {
  const found: string[] = [];
  for (const { from, to } of edges) {
    const a = layerOf(from);
    const b = layerOf(to);
    if (a && b && !allowed(a, b)) found.push(`${from} → ${to} (${a} may not import ${b})`);
  }
  return found;
}

/** Each cycle of run-time imports between modules (type-only ones left out), once, as `a → b → … → a`. */
export function cycles(edges: readonly ImportEdge[]): string[] {
  const next = new Map<string, string[]>();
  for (const { from, to, typeOnly } of edges) if (!typeOnly) next.set(from, [...(next.get(from) ?? []), to]);
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const found: string[] = [];
  const visit = (node: string): void => {
    state.set(node, "open");
    stack.push(node);
    for (const to of next.get(node) ?? []) {
      if (state.get(to) === "open") found.push([...stack.slice(stack.indexOf(to)), to].join(" → "));
      else if (!state.has(to)) visit(to);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of [...next.keys()].sort()) if (!state.has(node)) visit(node);
  return found;
}

export const MAX_MODULE_LINES = 400;
export const MAX_FUNCTION_LINES = 60;

/**
 * Modules over the size rule with neither a split nor a reason yet (issue 35 item 5, what remains of it): each is to be
 * split, or to say why not at its top. A module that comes within the rule must leave this list (the check says so).
 */
export const SPLIT_PENDING: ReadonlySet<string> = new Set([
  "plugin/request/transform.ts",
  "plugin/transport/local-server/server.ts",
  "src/browse/server.ts",
  "src/compactor/worker.ts",
  "src/embedded/server.ts",
  "src/memory/assembly.ts",
  "src/memory/browse-tree.ts",
  "src/memory/browse.ts",
  "src/memory/service.ts",
  "src/store/ingest-write.ts",
]);

/** What breaks the size rule in one module's text: too many lines, each function too long (none when it says why). */
export function sizeProblems(path: string, text: string): string[] {
  if (/^\/\/ size: \S/m.test(text.split("\n").slice(0, 12).join("\n"))) return [];
  const problems: string[] = [];
  const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
  if (lines > MAX_MODULE_LINES) problems.push(`${path}: ${lines} lines`);
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const body = node.body as ts.Node;
      const first = source.getLineAndCharacterOfPosition(body.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(body.getEnd()).line;
      if (last - first + 1 > MAX_FUNCTION_LINES)
        problems.push(`${path}:${first + 1}: a function of ${last - first + 1} lines`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return problems;
}

/** The size problems of every module under `folders`, and the pending ones that no longer have any. */
export function sizeViolations(root: string, folders: readonly string[] = ["src", "plugin"]): string[] {
  const found: string[] = [];
  const visit = (directory: string): void => {
    for (const entry of readdirSync(join(root, directory), { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) visit(path);
      else if (entry.name.endsWith(".ts")) {
        const problems = sizeProblems(path, readFileSync(join(root, path), "utf8"));
        if (SPLIT_PENDING.has(path)) {
          if (problems.length === 0) found.push(`${path} is within the size rule now: take it off SPLIT_PENDING`);
        } else found.push(...problems);
      }
    }
  };
  for (const folder of folders) visit(folder);
  return found;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const edges = listImports(root);
  const problems = [
    ...arrowViolations(edges),
    ...cycles(edges).map((cycle) => `cycle: ${cycle}`),
    ...sizeViolations(root),
  ];
  for (const problem of problems) process.stdout.write(`${problem}\n`);
  process.stdout.write(`${edges.length} imports, ${problems.length} problems\n`);
  process.exitCode = problems.length > 0 ? 1 : 0;
}
