-- The unique constraint on records.event_key gets a name of its own (issue 11). The ingest recognises a twin insert
-- (two writers sealing one finalization key into different sessions at once) by unique_violation, SQLSTATE 23505, on
-- this constraint and runs its transaction again (src/memory/ingest.ts); until now it matched the name PostgreSQL
-- generated for the inline UNIQUE of 001_source_records.sql, which nothing in the schema states. Renaming the
-- constraint renames its index too; no row is rewritten.
ALTER TABLE optchat.records RENAME CONSTRAINT records_event_key_key TO records_event_key_unique;
