import { type NodeAddress, parseRef, refOf } from "./tree.js";

/**
 * Refs as the model sees and types them:
 * - `pub:start+count` — a line of the scope's shared tree (over publication numbers);
 * - `<sessionId>:<generation>:start+count` — a line of a session's tree (publication covers name these);
 * - `start+count` — a line of the caller's own session tree.
 * They identify data; they never grant access: every lookup is filtered by the caller's scope and snapshot.
 */
export type MemoryRef =
  | { readonly tree: "shared"; readonly node: NodeAddress }
  | { readonly tree: "session"; readonly sessionId: string; readonly generation: number; readonly node: NodeAddress }
  | { readonly tree: "own"; readonly node: NodeAddress };

export function parseMemoryRef(text: string): MemoryRef | undefined {
  const trimmed = text.trim();
  if (trimmed.startsWith("pub:")) {
    const node = parseRef(trimmed.slice(4));
    return node ? { tree: "shared", node } : undefined;
  }
  const session = /^([A-Za-z0-9_][A-Za-z0-9_.-]{0,199}):(\d{1,9}):(\d+\+\d+)$/.exec(trimmed);
  if (session) {
    const node = parseRef(session[3] as string);
    return node
      ? { tree: "session", sessionId: session[1] as string, generation: Number(session[2]), node }
      : undefined;
  }
  const node = parseRef(trimmed);
  return node ? { tree: "own", node } : undefined;
}

export function sharedRef(node: NodeAddress): string {
  return `pub:${refOf(node)}`;
}

export function sessionRef(sessionId: string, generation: number, node: NodeAddress): string {
  return `${sessionId}:${generation}:${refOf(node)}`;
}
