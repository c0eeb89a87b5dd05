/**
 * How a setting's accepted values are said, from the same numbers and words its schema checks (src/memory/settings.ts
 * for memory's settings, plugin/base/settings.ts for the plugin's): no imports, so OpenCode's thread may read the
 * plugin's declarations without loading zod or the memory service.
 */

/** "an integer from min to max" and `rest` (`: what it means`, ` (a note)`). */
export function integerText([min, max]: readonly [number, number], rest: string): string {
  return `an integer from ${min} to ${max}${rest}`;
}

/** "0 (what 0 stands for) or an integer from min to max" (said "up to `upTo`" where another setting bounds it). */
export function zeroOrIntegerText(
  [min, max]: readonly [number, number],
  words: { readonly zero: string; readonly upTo?: string },
  rest: string,
): string {
  const upper = words.upTo ? `up to ${words.upTo}` : `to ${max}`;
  return `0 (${words.zero}) or an integer from ${min} ${upper}${rest}`;
}

/** One of a few words, each with what it means (none said when empty): `'a' (…), 'b' or 'c' (…)` and `rest`. */
export function wordsText(meanings: Readonly<Record<string, string>>, rest = ""): string {
  const said = Object.entries(meanings).map(([word, meaning]) => (meaning ? `'${word}' (${meaning})` : `'${word}'`));
  return `${said.length > 1 ? `${said.slice(0, -1).join(", ")} or ${said.at(-1)}` : said.join("")}${rest}`;
}
