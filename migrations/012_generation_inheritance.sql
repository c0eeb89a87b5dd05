-- Forks and rewinds (seed 000 §12, issue 15 items 2-3): a generation whose first records are another generation's,
-- taken over by reference: a fork's copies of its parent's messages matched to the parent's records, or a rewound
-- session's retained prefix.
-- The inherited records are rows of the child's generation that point at the parent's payload blobs (no payload is
-- stored twice) and say where they came from (attributes.inheritedFrom); the parent's summary nodes over whole
-- inherited ranges are taken over with their text, not summarized again. These columns record the provenance. They
-- carry no foreign key: deleting the parent leaves the child's own inherited history in place (the fork keeps its
-- accessible copy, seed 000 §12 "Source records referenced by a surviving fork").
ALTER TABLE optchat.generations
  ADD COLUMN inherited_from_session_id text,
  ADD COLUMN inherited_from_generation integer,
  ADD COLUMN inherited_records bigint NOT NULL DEFAULT 0 CHECK (inherited_records >= 0),
  ADD CONSTRAINT generations_inheritance_check CHECK (
    (inherited_from_session_id IS NULL) = (inherited_from_generation IS NULL)
    AND (inherited_from_session_id IS NOT NULL OR inherited_records = 0));

-- A rewind (OpenCode's revert) retires the publications of the turns it superseded, as a deletion does
-- (store/retire-publications.ts), with its own reason: their shared leaves show that the turn was reverted.
ALTER TABLE optchat.publications
  DROP CONSTRAINT publications_retired_check,
  ADD CONSTRAINT publications_retired_check CHECK (
    (retired_at IS NULL) = (retired_reason IS NULL) AND retired_reason IN ('deleted', 'revoked', 'reverted'));
