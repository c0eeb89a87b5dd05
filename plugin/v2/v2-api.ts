/**
 * The part of V2's plugin context (`setup(ctx)`) this host uses, as observed on 2.1.2 (docs/opencode-v2-notes.md):
 * the published types (`@opencode-ai/plugin@1.18.33` `v2/*`) have no session hooks, so these are written from the
 * probe's records. Hooks mutate their input in place and may return a promise, which V2 awaits.
 */
export interface V2Text {
  type: "text";
  text: string;
}

export interface V2Message {
  id?: string;
  role: "user" | "assistant" | "tool" | "system";
  content: unknown[];
  metadata?: Record<string, unknown>;
}

export interface V2ContextInput {
  sessionID: string;
  model: { id: string; providerID: string };
  system: V2Text[];
  messages: V2Message[];
  options: { maxTokens?: number };
  agent: string;
  tools: Record<string, unknown>;
}

export interface V2PromptInput {
  sessionID: string;
  messageID: string;
  prompt: { text: string; files?: unknown[] };
  delivery?: string;
}

/** `compaction` carries the context fields; `result`, when set, is recorded as the checkpoint and no model is asked. */
export interface V2CompactionInput extends V2ContextInput {
  result?: { summary: string; native?: unknown; metadata?: Record<string, unknown> };
}

export interface V2Event {
  type: string;
  data?: Record<string, unknown>;
}

export interface V2ToolContext {
  sessionID: string;
  messageID: string;
  id?: string;
}

export interface V2ToolRegistry {
  add(tool: {
    name: string;
    options?: { codemode?: boolean };
    description: string;
    input: unknown;
    execute: (args: unknown, context: V2ToolContext) => Promise<{ content: V2Text[] }>;
  }): void;
}

/** `ctx.session.get({ sessionID })`: a subagent's session has `parentID`, a fork's has `fork.sessionID`. */
export interface V2SessionInfo {
  id: string;
  parentID?: string;
  fork?: { sessionID?: string };
}

/** A tool part of an assistant message in `ctx.session.context(…)`, with its call's state. */
export interface V2ToolPart {
  type: "tool";
  id: string;
  name: string;
  state?: { status?: string; input?: unknown; content?: unknown; error?: unknown };
}

/** A message of `ctx.session.context({ sessionID })`: the session's stored history (the prompt not yet in it). */
export type V2StoredMessage =
  | { type: "user"; id: string; text?: string; time?: { created?: number } }
  | {
      type: "assistant";
      id: string;
      time?: { created?: number; completed?: number };
      content?: Array<{ type: "text"; text: string } | V2ToolPart | { type: string }>;
    }
  | { type: string; id?: string };

/** `ctx.model.list()`: the configured models with their limits. */
export interface V2ModelInfo {
  id?: string;
  modelID?: string;
  providerID?: string;
  limit?: { context?: number; output?: number };
}

export interface V2Context {
  options?: Record<string, unknown>;
  location?: { directory?: string; project?: { id?: string; directory?: string } };
  session: {
    hook(name: string, fn: (input: never) => unknown): unknown;
    get?(input: { sessionID: string }): Promise<V2SessionInfo>;
    context?(input: { sessionID: string }): Promise<V2StoredMessage[]>;
  };
  model?: { list(): Promise<{ data?: V2ModelInfo[] }> };
  event: { subscribe(): AsyncIterable<V2Event> };
  tool?: { transform(fn: (registry: V2ToolRegistry) => void): unknown };
}
