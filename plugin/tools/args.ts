/**
 * The memory tools' arguments as plain JSON Schema, checked here, instead of zod 4 schemas from
 * `@opencode-ai/plugin`.
 *
 * Why: `@opencode-ai/plugin` exists at run time only to hand over its own copy of zod 4 (`tool.schema`), and importing
 * it was the largest single piece of the plugin's import in OpenCode's Bun: 72-87 ms of CPU of ~250 (zod 4 core alone
 * 42-54 ms; measured by importing each module alone, December 2026), paid by every `opencode run` before its first
 * request (issue 9 item 2, docs/opencode-notes.md "What `opencode run` pays"). OpenCode 1.18.33 takes a plugin tool
 * whose every argument is a JSON Schema object as it is: `{type: "object", properties: args, required: [every
 * name]}`, and hands the model's arguments to `execute` unchecked (its tool registry, `ToolRegistry.state`). So:
 * - every argument is required, and an optional one is nullable instead (`null` means "not given", the pattern of
 *   OpenAI's strict tool schemas); an argument missing altogether is taken as not given too;
 * - the arguments are checked here, with the bounds the zod schemas had, and a bad one is the tool's error text.
 */

interface ArgBase {
  readonly description: string;
  /** Not given: null (or missing) from the model, undefined for `execute`. */
  readonly optional?: boolean;
}

export type ArgSpec =
  | (ArgBase & { readonly type: "string"; readonly minLength?: number; readonly maxLength: number })
  | (ArgBase & { readonly type: "enum"; readonly values: readonly string[] })
  | (ArgBase & { readonly type: "integer"; readonly minimum: number; readonly maximum: number });

export type ArgSpecs = Readonly<Record<string, ArgSpec>>;

type ValueOf<S extends ArgSpec> = S extends { type: "integer" }
  ? number
  : S extends { type: "enum"; values: readonly (infer V)[] }
    ? V
    : string;

/** What `execute` receives for `specs`: optional arguments may be undefined. */
export type ArgsOf<Specs extends ArgSpecs> = {
  [K in keyof Specs]: Specs[K] extends { optional: true } ? ValueOf<Specs[K]> | undefined : ValueOf<Specs[K]>;
};

type JsonSchema = Record<string, unknown>;

/**
 * The schema the model sees: the type and the description only. The bounds are checked here (parseToolArgs) and a
 * bad argument's error names them; left out of the schema they cost nothing in every request (the tools are resent
 * with each one: the bounds were ~200 of the memory tools' ~4,070 bytes, bench cache `memoryTools`).
 */
function schemaOf(spec: ArgSpec): JsonSchema {
  const nullable = spec.optional === true;
  switch (spec.type) {
    case "string":
      return { type: nullable ? ["string", "null"] : "string", description: spec.description };
    case "enum":
      return {
        type: nullable ? ["string", "null"] : "string",
        enum: nullable ? [...spec.values, null] : [...spec.values],
        description: spec.description,
      };
    case "integer":
      return { type: nullable ? ["integer", "null"] : "integer", description: spec.description };
  }
}

/** The JSON Schema of each argument, as OpenCode 1.18.33 passes a plugin tool's `args` to the model. */
export function jsonSchemaArgs(specs: ArgSpecs): Record<string, JsonSchema> {
  return Object.fromEntries(Object.entries(specs).map(([name, spec]) => [name, schemaOf(spec)]));
}

/** Why `value` does not fit `spec`, or undefined when it does. */
function problemOf(spec: ArgSpec, value: unknown): string | undefined {
  switch (spec.type) {
    case "string":
      if (typeof value !== "string") return "must be a string";
      if (spec.minLength !== undefined && value.length < spec.minLength)
        return `must have at least ${spec.minLength} character(s)`;
      if (value.length > spec.maxLength) return `must have at most ${spec.maxLength} characters`;
      return undefined;
    case "enum":
      return typeof value === "string" && spec.values.includes(value)
        ? undefined
        : `must be one of ${spec.values.map((v) => `"${v}"`).join(", ")}`;
    case "integer":
      if (typeof value !== "number" || !Number.isInteger(value)) return "must be an integer";
      if (value < spec.minimum || value > spec.maximum) return `must be from ${spec.minimum} to ${spec.maximum}`;
      return undefined;
  }
}

/**
 * The model's arguments for `tool`, checked against `specs`; throws one error naming every bad argument (it becomes
 * the tool's result, so the model can call again). Names not in `specs` are ignored, as zod's object did.
 */
export function parseToolArgs<Specs extends ArgSpecs>(tool: string, specs: Specs, raw: unknown): ArgsOf<Specs> {
  const given = typeof raw === "object" && raw !== null && !Array.isArray(raw) ? (raw as Record<string, unknown>) : {};
  const out: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [name, spec] of Object.entries(specs)) {
    const value = given[name];
    if (value === undefined || value === null) {
      if (!spec.optional) problems.push(`${name} is required`);
      continue;
    }
    const problem = problemOf(spec, value);
    if (problem) problems.push(`${name} ${problem}`);
    else out[name] = value;
  }
  if (problems.length > 0) throw new Error(`invalid arguments for ${tool}: ${problems.join("; ")}`);
  return out as ArgsOf<Specs>;
}
