-- Migration 0006: `lifecycle_holds`, the stored records (migration 0003) of lifecycles that have a hold, kept apart
-- so that the hold queries (resolution groups and mix, transfer tails, KV pinned, longest and open holds, and the
-- open_hold flags) read the lifecycles that ended with KV pages held rather than every record of a window. On the
-- 10 M-lifecycle scratch dataset about one lifecycle in five has a hold; during an abort storm more do, and the
-- saving shrinks with them, but never below the records' own cost.
--
-- Filled like lifecycle_flags (0004): a materialized view on every INSERT into lifecycle_records, with the same
-- rows, versions and deletions, so FINAL keeps each held lifecycle's newest record. A lifecycle cannot lose its
-- hold as more spans arrive (spans only add evidence, and a hold span stays one), so every record computed after its
-- first hold span passes; and every deletion passes (is_deleted = 1: the record moved to an earlier five minutes),
-- held or not, so a held row never outlives its record's move. Records stored before this migration get theirs when
-- pipeline/migrate.ts computes every record again after it.

CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_holds{{local}} {{on_cluster}}
ENGINE = {{replacing}}(computed_at, is_deleted)
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (bucket, cluster, request_id, generation)
TTL toDateTime(bucket) + INTERVAL {{ttl_days}} DAY
EMPTY AS
SELECT *
FROM {{db}}.lifecycle_records{{local}};

ALTER TABLE {{db}}.lifecycle_holds{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS last_seen_range last_seen TYPE minmax GRANULARITY 1;

-- Holds still open are read over the hours before a window (a stuck hold sends no spans): this index lets those
-- reads skip granules without any.
ALTER TABLE {{db}}.lifecycle_holds{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS resolution_set resolution TYPE set(8) GRANULARITY 1;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_holds {{on_cluster}} AS {{db}}.lifecycle_holds{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_holds{{local}}, cityHash64(cluster, request_id));

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.lifecycle_holds_mv{{local}} {{on_cluster}} TO {{db}}.lifecycle_holds{{local}} AS
SELECT *
FROM {{db}}.lifecycle_records{{local}}
WHERE is_deleted = 1 OR hold_start IS NOT NULL;
