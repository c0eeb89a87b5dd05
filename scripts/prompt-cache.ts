/**
 * The provider prompt-cache simulator of the scripted model (scripts/model-server.ts), so request cost can be measured
 * here without a network model (issue 14, docs/caching.md). Pure apart from its injected clock.
 *
 * Tokens: one fixed estimator for everything, `ceil(UTF-8 bytes / 3.5)` of a block's canonical JSON (the figure the
 * issue's measurements used). It is not any vendor's tokenizer; what matters is that native and optchat requests are
 * counted alike.
 *
 * Anthropic (Messages API, documented prompt-caching rules):
 * - A request is a sequence of blocks: each tool definition, each system text block, each message content block, in
 *   that order. A block carrying `cache_control` is a breakpoint; more than 4 is an error (the API answers 400).
 * - At each breakpoint the cache is looked up for the exact prefix ending at that block, then at each earlier block
 *   boundary up to 20 blocks back (the breakpoint's own block included); the longest live entry found over all
 *   breakpoints is read.
 * - An entry is written at each breakpoint whose prefix is not cached yet and is at least the minimum cacheable length
 *   (1,024 tokens); tokens between what was read and the last breakpoint written are cache writes, tokens after the
 *   last breakpoint are uncached input.
 * - A top-level `cache_control` (automatic caching) is one more breakpoint, on the last block.
 * - Entries live 5 minutes from their last write or read; a read renews the entry read.
 * - Usage as the API reports it: `input_tokens` (uncached), `cache_read_input_tokens`, `cache_creation_input_tokens`.
 *
 * OpenAI-compatible (automatic prefix caching as OpenAI and LCP-caching servers do it):
 * - The prompt is the serialized tools + messages; the longest common prefix with any live earlier prompt is cached,
 *   counted from 1,024 tokens in 128-token steps, reported as `usage.prompt_tokens_details.cached_tokens`. There are
 *   no writes to pay for; every prompt becomes an entry (5-minute lifetime, renewed when read).
 */
import { createHash, type Hash } from "node:crypto";

export const BYTES_PER_TOKEN = 3.5;
export const ANTHROPIC_MIN_CACHEABLE_TOKENS = 1024;
export const ANTHROPIC_MAX_BREAKPOINTS = 4;
export const ANTHROPIC_LOOKBACK_BLOCKS = 20;
export const OPENAI_MIN_CACHED_TOKENS = 1024;
export const OPENAI_CACHE_STEP_TOKENS = 128;
export const CACHE_TTL_MS = 5 * 60 * 1000;
/** OpenAI-compatible prompts kept for prefix matching (the bench sends a few hundred; older ones have expired). */
const OPENAI_MAX_ENTRIES = 256;

export function estimateTokensOfBytes(bytes: number): number {
  return Math.ceil(bytes / BYTES_PER_TOKEN);
}

export function estimateTokensOf(text: string): number {
  return estimateTokensOfBytes(Buffer.byteLength(text, "utf8"));
}

export interface CacheUsage {
  /** All input tokens of the request: uncached + read + written. */
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
}

export class CacheRuleError extends Error {}

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

export interface AnthropicBlock {
  /** Canonical JSON of the block without its cache_control. */
  readonly json: string;
  readonly breakpoint: boolean;
}

/** The blocks of an Anthropic Messages request in cache order: tools, system, then each message's content blocks. */
export function anthropicBlocks(body: Json): AnthropicBlock[] {
  const blocks: AnthropicBlock[] = [];
  const add = (value: Json, role?: string) => {
    const marked = typeof value === "object" && value !== null && value.cache_control !== undefined;
    const { cache_control: _ignored, ...rest } = typeof value === "object" && value !== null ? value : { text: value };
    blocks.push({ json: JSON.stringify(role ? { role, ...rest } : rest), breakpoint: marked });
  };
  for (const tool of Array.isArray(body.tools) ? body.tools : []) add(tool);
  if (typeof body.system === "string") add({ type: "text", text: body.system });
  else for (const block of Array.isArray(body.system) ? body.system : []) add(block);
  for (const message of Array.isArray(body.messages) ? body.messages : []) {
    const content =
      typeof message.content === "string" ? [{ type: "text", text: message.content }] : (message.content ?? []);
    // The role is part of the first block of a message: the same text as user or assistant is a different prefix.
    content.forEach((block: Json, i: number) => {
      add(block, i === 0 ? message.role : undefined);
    });
  }
  return blocks;
}

interface Entry {
  expiresAt: number;
}

export class AnthropicCache {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Applies the rules to one request and returns its usage; throws CacheRuleError for more than 4 breakpoints. */
  apply(body: Json): CacheUsage {
    const blocks = anthropicBlocks(body);
    const breakpoints = blocks.flatMap((b, i) => (b.breakpoint ? [i] : []));
    // Automatic caching: a top-level cache_control is a breakpoint on the last block (what @ai-sdk/anthropic sends
    // when OpenCode's own marks are off, docs/opencode-notes.md "Cache marks").
    if (body.cache_control && blocks.length > 0 && !breakpoints.includes(blocks.length - 1))
      breakpoints.push(blocks.length - 1);
    if (breakpoints.length > ANTHROPIC_MAX_BREAKPOINTS) {
      throw new CacheRuleError(
        `A maximum of ${ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control may be provided. Found ${breakpoints.length}.`,
      );
    }
    const now = this.now();
    const model = typeof body.model === "string" ? body.model : "";
    // keys[i] and tokens[i]: the prefix ending with block i.
    const keys: string[] = [];
    const tokens: number[] = [];
    const hash: Hash = createHash("sha256").update(model);
    let bytes = 0;
    for (const block of blocks) {
      hash.update(`\u0000${block.json}`);
      keys.push(hash.copy().digest("hex"));
      bytes += Buffer.byteLength(block.json, "utf8");
      tokens.push(estimateTokensOfBytes(bytes));
    }
    const live = (i: number): boolean => {
      const entry = this.entries.get(keys[i] as string);
      if (!entry) return false;
      if (entry.expiresAt <= now) {
        this.entries.delete(keys[i] as string);
        return false;
      }
      return true;
    };
    let readEnd = -1;
    for (const bp of breakpoints) {
      for (let i = bp; i >= 0 && i > bp - ANTHROPIC_LOOKBACK_BLOCKS; i--) {
        if (live(i)) {
          if (i > readEnd) readEnd = i;
          break;
        }
      }
    }
    if (readEnd >= 0) this.entries.set(keys[readEnd] as string, { expiresAt: now + CACHE_TTL_MS });
    let writeEnd = readEnd;
    for (const bp of breakpoints) {
      if (bp <= readEnd || (tokens[bp] as number) < ANTHROPIC_MIN_CACHEABLE_TOKENS) continue;
      if (!live(bp)) this.entries.set(keys[bp] as string, { expiresAt: now + CACHE_TTL_MS });
      writeEnd = bp;
    }
    const total = tokens.at(-1) ?? 0;
    const read = readEnd >= 0 ? (tokens[readEnd] as number) : 0;
    const written = writeEnd > readEnd ? (tokens[writeEnd] as number) - read : 0;
    return { inputTokens: total, cacheReadTokens: read, cacheWriteTokens: written };
  }
}

/** The serialized prompt of an OpenAI-compatible request: tools, then messages (what a prefix cache sees). */
export function openAiPrompt(body: Json): string {
  return JSON.stringify({ model: body.model, tools: body.tools ?? [], messages: body.messages ?? [] });
}

export class OpenAiPrefixCache {
  private entries: { prompt: string; expiresAt: number }[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  apply(body: Json): CacheUsage {
    const prompt = openAiPrompt(body);
    const now = this.now();
    this.entries = this.entries.filter((e) => e.expiresAt > now);
    let best = 0;
    let bestEntry: { prompt: string; expiresAt: number } | undefined;
    for (const entry of this.entries) {
      const common = commonPrefixLength(entry.prompt, prompt);
      if (common > best) {
        best = common;
        bestEntry = entry;
      }
    }
    const total = estimateTokensOf(prompt);
    const commonTokens = Math.floor(Buffer.byteLength(prompt.slice(0, best), "utf8") / BYTES_PER_TOKEN);
    const cached =
      commonTokens >= OPENAI_MIN_CACHED_TOKENS
        ? Math.floor(commonTokens / OPENAI_CACHE_STEP_TOKENS) * OPENAI_CACHE_STEP_TOKENS
        : 0;
    if (cached > 0 && bestEntry) bestEntry.expiresAt = now + CACHE_TTL_MS;
    this.entries.push({ prompt, expiresAt: now + CACHE_TTL_MS });
    if (this.entries.length > OPENAI_MAX_ENTRIES) this.entries.shift();
    return { inputTokens: total, cacheReadTokens: Math.min(cached, total), cacheWriteTokens: 0 };
  }
}

/** Length in UTF-16 code units of the longest common prefix of two strings. */
export function commonPrefixLength(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  // Compare in chunks first: prompts are hundreds of KB and mostly equal.
  let i = 0;
  const chunk = 4096;
  while (i + chunk <= n && a.slice(i, i + chunk) === b.slice(i, i + chunk)) i += chunk;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}
