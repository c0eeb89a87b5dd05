import { createBoss, installQueues } from "../compactor/queue.js";
import { type MigrationOutcome, migrateDatabase } from "../store/migrate.js";

/**
 * Everything `optchat migrate` does: our schema (postgres-migrations, numbered SQL files) and the job queue (pg-boss
 * installs and versions its own schema under an advisory lock; we then create or update our queue). Both are safe to
 * run from several processes at once.
 */
export async function migrateAll(
  databaseUrl: string,
  log: (line: string) => void = () => {},
): Promise<MigrationOutcome> {
  const outcome = await migrateDatabase(databaseUrl, log);
  const boss = await createBoss(databaseUrl, "installer");
  boss.on("error", () => {});
  await boss.start();
  try {
    await installQueues(boss);
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
  return outcome;
}
