import type { DiagnosticsView, SessionState } from "./session-state.js";

/**
 * A session's diagnostics slice: what is shown of it (memory_inspect, and the transform's reason to skip), written
 * here alone; the other parts read it as `DiagnosticsView` (plugin/turns/session-state.ts).
 */
export class DiagnosticsSlice implements DiagnosticsView {
  memoryOff: string | undefined = undefined;
}

const slice = (state: SessionState): DiagnosticsSlice => state.diagnostics as DiagnosticsSlice;

/** Memory goes off for the session, for `reason` (plugin/turns/session-rewind.ts); returns what inspect shows. */
export function switchMemoryOff(state: SessionState, reason: string): string {
  const shown = `${reason}; memory is off for this session and its native history is sent as it is`;
  slice(state).memoryOff = shown;
  return shown;
}

/** An earlier process switched memory off for the session: its stored reason, as it was shown then. */
export function memoryWasSwitchedOff(state: SessionState, shown: string): void {
  slice(state).memoryOff = shown;
}
