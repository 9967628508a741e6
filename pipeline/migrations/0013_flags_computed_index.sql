-- Migration 0013: a min-max index on lifecycle_flags.computed_at (0004), for the violation push's lookups of what was
-- stored lately (incidents.sql with recent_seconds). The pipeline nudges the push after every record refresh, several
-- times a second under load, and each such lookup asks only which incidents gained a record in the last minute: with
-- the index it reads the granules written in that minute (and, under FINAL, the versions of the same lifecycles),
-- not every flagged record of the hours before. Parts written before this migration have no index and are read
-- whole until merges rewrite them or they age out of the lookup's range (hours); no mutation is worth running for it.

ALTER TABLE {{db}}.lifecycle_flags{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS computed_range computed_at TYPE minmax GRANULARITY 1;
