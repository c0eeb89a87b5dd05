/** The embedded server as the e2e install tests see it: what a person's runs left in it. */
import pg from "pg";
import { embeddedUrl } from "../../src/embedded/paths.js";
import { retrying } from "./polling.js";

/** Waits (up to 60 s) until the embedded server's memory holds a publication. */
export async function firstPublication(socketDir: string | undefined): Promise<void> {
  if (!socketDir) throw new Error("no embedded server configured for the test's HOME");
  await retrying(
    async () => {
      const client = new pg.Client({ connectionString: embeddedUrl(socketDir) });
      await client.connect();
      try {
        const rows = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.publications");
        if ((rows.rows[0]?.n ?? 0) < 1) throw new Error("no publication yet");
      } finally {
        await client.end();
      }
    },
    60_000,
    "the first run's turn published",
  );
}
