-- Migration 0004: `lifecycle_flags`, the stored records (migration 0003) that carry a safety flag, kept apart so
-- that the flag queries read the few percent of lifecycles that are flagged rather than every record of a window
-- (at 875 k lifecycles an hour the flags read 1.5 M record rows under FINAL; the flagged ones are about 8 %).
--
-- Filled by a materialized view on every INSERT into lifecycle_records (the pipeline's refreshes and rebuilds),
-- with the same rows, versions and deletions, so FINAL keeps each flagged lifecycle's newest flagged record. Records
-- stored before this migration get theirs when pipeline/migrate.ts computes every record again after it.
--
-- The kinds stored are those a lifecycle cannot lose as more of its spans arrive: spans only add transfers, acks,
-- drains and checksums, and a generation's release and admission are its earliest. Only a second release or
-- admission of one generation, earlier than the first, can clear one (unsafe_release, admission_leak); such a flag
-- stays here, sticky, while the record page shows the current record. open_hold depends on the clock, not on the
-- spans, and is read from the held records (migration 0006).
--
-- Deletions (is_deleted = 1: the record moved to an earlier bucket) always pass, flagged or not, so a flagged row
-- never outlives its record's move.

CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_flags{{local}} {{on_cluster}}
ENGINE = {{replacing}}(computed_at, is_deleted)
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (bucket, cluster, request_id, generation)
TTL toDateTime(bucket) + INTERVAL {{ttl_days}} DAY
EMPTY AS
SELECT *
FROM {{db}}.lifecycle_records{{local}};

ALTER TABLE {{db}}.lifecycle_flags{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS last_seen_range last_seen TYPE minmax GRANULARITY 1;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_flags {{on_cluster}} AS {{db}}.lifecycle_flags{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_flags{{local}}, cityHash64(cluster, request_id));

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.lifecycle_flags_mv{{local}} {{on_cluster}} TO {{db}}.lifecycle_flags{{local}} AS
SELECT *
FROM {{db}}.lifecycle_records{{local}}
WHERE is_deleted = 1
   OR late_writes > 0
   OR unsafe_release
   OR acks_after_failed_send > 0
   OR stale_acks_accepted > 0
   OR (admission_outcome = 'rejected' AND (chunks_launched > 0 OR handoff_at IS NOT NULL))
   OR checksum_outcome = 'mismatch';
