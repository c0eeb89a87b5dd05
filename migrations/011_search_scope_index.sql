-- Search at scale (issue 10 item 7): a record's scope on the record, and one GIN index over (scope, terms).
--
-- The global index on records.search alone holds every scope's postings: a word common in the caller's scope is as
-- common in each of the others, so at 1M records over 100 scopes a search read and rechecked the postings of all
-- 100 scopes to find the caller's 1%, or walked every visible record of the scope and tested each (`npm run bench
-- -- search-scale`, docs/shared-memory.md "Search at scale": p99 far above 50 ms for common and Latin queries).
-- With the scope as the index's first column, a search reads the posting list of its own scope and the word's and
-- intersects them inside the index (GIN's AND scan skips through the longer list), so its work follows its scope's
-- size, never the server's. btree_gin provides GIN operator classes for plain types (a trusted extension since
-- PostgreSQL 13, shipped with the server's contrib modules, as in the postgres images docker-compose.yml uses).
--
-- records.scope_id is its session's scope (sessions.scope_id never changes once a session is opened); ingestion writes
-- it from the session row in the sealing statement (src/store/ingest-commit.ts writeSealed).
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- Every search is in one scope: the scope-less index only costs writes. Dropped first, so that the backfill below
-- does not add every record's terms to it again (1M records: minutes instead of most of an hour).
DROP INDEX optchat.records_search_idx;
ALTER TABLE optchat.records ADD COLUMN scope_id text;
UPDATE optchat.records r SET scope_id = s.scope_id FROM optchat.sessions s WHERE s.session_id = r.session_id;
ALTER TABLE optchat.records ALTER COLUMN scope_id SET NOT NULL;
CREATE INDEX records_scope_search_idx ON optchat.records USING gin (scope_id, search);
