/**
 * The test helpers, one module per concern under tests/helpers/; every test imports them from here.
 */
export { HOSTILE_TEXT, seedBrowseMemory } from "./helpers/browse-seed.js";
export { loopTurns, ManualClock } from "./helpers/clock.js";
export {
  createTestDatabase,
  databaseDigest,
  freshDatabaseName,
  noOpenTransaction,
  refuseConnections,
  waitForIdleQueues,
  waitForLockWaiters,
  waitForPublications,
} from "./helpers/database.js";
export { firstPublication } from "./helpers/embedded.js";
export { readFixture, seededRandom, shuffled, useScratchDirs } from "./helpers/fixtures.js";
export {
  finishTurnNeedingSummary,
  ingestEvent,
  LARGE_WINDOW,
  MEDIUM_WINDOW,
  messageWriter,
  sessionWithOneMessage,
  type TestEvent,
  type TestMemory,
  turnWriter,
  useTestMemory,
} from "./helpers/memory.js";
export {
  PLUGIN_PATH,
  type PluginServer,
  type PluginWorld,
  startPluginWorld,
  usePluginServer,
} from "./helpers/opencode.js";
export { eventually, retrying } from "./helpers/polling.js";
export {
  collect,
  type Finished,
  itLeavesThePreviousStateWhenKilled,
  ROOT,
  runCli,
  startScript,
  TEST_SUMMARIZER_ENV,
  waitForLine,
} from "./helpers/processes.js";
export { asAdmin, type TestRoles, testRoles } from "./helpers/roles.js";
export { startWorkerProcess, useWorkerProcesses, type WorkerProcess } from "./helpers/workers.js";
