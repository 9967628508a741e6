-- Migration 0007: the set index on lifecycle_records.resolution (0003) goes. It served the reads of holds still
-- open, which read the held records (0006, with an index of their own) since; no query filters the records by
-- resolution any more, and every record refresh was still computing the index for them.

ALTER TABLE {{db}}.lifecycle_records{{local}} {{on_cluster}} DROP INDEX IF EXISTS resolution_set;
