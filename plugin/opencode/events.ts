import type { HostMessageInfo, HostPart } from "./messages.js";

/**
 * OpenCode 1.18.33's bus events the adapter acts on, read from the untyped `event` hook argument (docs/opencode-notes.md
 * lists what each carries). Anything else, or an event missing the fields it is acted on by, reads as undefined: the
 * hook receives every event of the instance, replayed and foreign ones included.
 */
export type HostEvent =
  | { readonly type: "part"; readonly part: HostPart }
  | { readonly type: "assistant"; readonly info: HostMessageInfo }
  | { readonly type: "created"; readonly info: { id: string; parentID?: string; title?: string } }
  | { readonly type: "deleted"; readonly hostSessionId: string }
  | { readonly type: "idle"; readonly hostSessionId: string }
  | { readonly type: "busy"; readonly hostSessionId: string }
  /** `session.updated`: `revertTo` is the message a staged revert goes back to, undefined when none is staged. */
  | { readonly type: "updated"; readonly hostSessionId: string; readonly revertTo: string | undefined }
  | { readonly type: "removed"; readonly hostSessionId: string; readonly messageId: string | undefined };

/**
 * The event types readHostEvent reads (every other type reads as undefined). The plugin's main thread passes only these
 * to the plugin's thread (plugin/transport/remote-hooks.ts): a streamed answer's deltas are most of OpenCode's events.
 */
export const HOST_EVENT_TYPES: ReadonlySet<string> = new Set([
  "message.part.updated",
  "message.updated",
  "session.created",
  "session.deleted",
  "session.status",
  "session.idle",
  "session.updated",
  "message.removed",
]);

export function readHostEvent(event: { type?: string; properties?: Record<string, unknown> }): HostEvent | undefined {
  const props = event.properties ?? {};
  const sessionId = typeof props.sessionID === "string" ? props.sessionID : undefined;
  switch (event.type) {
    case "message.part.updated": {
      const part = props.part as HostPart | undefined;
      return part?.messageID && part.id ? { type: "part", part } : undefined;
    }
    case "message.updated": {
      const info = props.info as HostMessageInfo | undefined;
      return info?.id && info.sessionID && info.role === "assistant" ? { type: "assistant", info } : undefined;
    }
    case "session.created": {
      const info = props.info as { id?: string; parentID?: string; title?: string } | undefined;
      return info?.id ? { type: "created", info: { ...info, id: info.id } } : undefined;
    }
    case "session.deleted": {
      const id = sessionId ?? (props.info as { id?: string } | undefined)?.id;
      return id ? { type: "deleted", hostSessionId: id } : undefined;
    }
    case "session.status": {
      const status = (props.status as { type?: string } | undefined)?.type;
      if (!sessionId) return undefined;
      if (status === "idle") return { type: "idle", hostSessionId: sessionId };
      if (status === "busy" || status === "retry") return { type: "busy", hostSessionId: sessionId };
      return undefined;
    }
    case "session.idle":
      return sessionId ? { type: "idle", hostSessionId: sessionId } : undefined;
    case "session.updated": {
      const info = props.info as { id?: string; revert?: { messageID?: string } } | undefined;
      return info?.id ? { type: "updated", hostSessionId: info.id, revertTo: info.revert?.messageID } : undefined;
    }
    case "message.removed":
      return sessionId
        ? { type: "removed", hostSessionId: sessionId, messageId: props.messageID as string | undefined }
        : undefined;
    default:
      return undefined;
  }
}
