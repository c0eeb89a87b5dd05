import pg from "pg";

/** A small pool on the test database whose idle-connection errors are ignored (the next query reports them). */
export function PgPool(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on("error", () => {});
  return pool;
}
