-- Deletion, revocation and archive (issue 15 items 4 and 5; docs/deletion.md).
--
-- A forgotten session leaves a tombstone: its sessions row (title and attributes cleared), its generations and the
-- turns its publications name (query cleared), because publication numbers stay gap-free (seed 000 §5) and a
-- publication row keeps its number after retirement. Everything with content goes: records and their unshared blobs,
-- staged partials, the session tree with its nodes and views, injections, adapter problems, conflicts. A late host event
-- for a tombstoned session is refused instead of bringing the session back (src/memory/open-session.ts).
ALTER TABLE optchat.sessions
  ADD COLUMN deleted_at timestamptz,
  -- Archived: hidden from session listings and discovery, nothing forgotten (docs/deletion.md "Archive").
  ADD COLUMN archived_at timestamptz;

-- A retired publication keeps its number and its identifiers; its shared leaf is replaced by a short removed marker
-- and the shared nodes above it are rebuilt from the surviving sources. 'deleted': its session was forgotten;
-- 'revoked': its session stopped sharing (moved to an isolated scope) and keeps its own memory.
ALTER TABLE optchat.publications
  ADD COLUMN retired_at timestamptz,
  ADD COLUMN retired_reason text,
  ADD CONSTRAINT publications_retired_check CHECK (
    (retired_at IS NULL) = (retired_reason IS NULL) AND retired_reason IN ('deleted', 'revoked'));

-- scopes.retention_epoch (001) is bumped by every deletion or revocation that touches the scope: a turn pinned at an
-- earlier epoch re-pins before it reads (src/memory/retention-epoch.ts).
CREATE INDEX sessions_deleted_idx ON optchat.sessions (scope_id) WHERE deleted_at IS NULL AND archived_at IS NULL;

-- Deleting a blob makes PostgreSQL check that no record references it (the foreign key records.payload_hash): without
-- an index that is a scan of every record per deleted blob (bench delete: 2.7 s to forget 1,000 records of 10,000,
-- quadratic in the scope). The same index answers "does a surviving record share this payload" (store/deletion.ts).
CREATE INDEX records_payload_hash_idx ON optchat.records (payload_hash);
