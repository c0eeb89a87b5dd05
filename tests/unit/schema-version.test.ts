import { readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MIGRATIONS_DIRECTORY, SCHEMA_VERSION } from "../../src/store/migrate.js";

describe("the expected schema version", () => {
  it("is the number of the newest migration, the files numbered 1..N without gaps", () => {
    const numbers = readdirSync(MIGRATIONS_DIRECTORY)
      .filter((name) => name.endsWith(".sql"))
      .map((name) => Number(/^(\d+)[-_]/.exec(name)?.[1]))
      .sort((a, b) => a - b);
    expect(numbers).toEqual(numbers.map((_, k) => k + 1));
    expect(SCHEMA_VERSION).toBe(numbers.length);
  });
});
