-- Migration 0003: `lifecycle_records`, the lifecycle records of migration 0002's view stored flat, ordered by
-- the hour of each lifecycle's first span, for the queries over a time window (the on-call page, the flags, the
-- gauges). The view merges every lifecycle's states on every read, so its cost grows with the table; this table
-- is read only for the window asked, through its order and a min-max index on last_seen.
--
-- Written by the pipeline: after every INSERT of spans it recomputes, from the view, the records of the lifecycles
-- those spans belong to (pipeline/sql/refresh_lifecycle_records.sql), before it commits their Kafka offsets. A
-- recomputation reads all of a lifecycle's states, so replays and late spans leave the same record as one pass.
--
--   bucket       the hour of first_seen: the row's place in the table. first_seen only moves earlier (a span
--                older than any seen so far), and when its hour changes the refresh writes deletions for the
--                later hours (up to 48), so a lifecycle has one live row.
--   computed_at  version: the newest computation reads a superset of the states any older one read.
--   is_deleted   1 for those deletions. Read with FINAL, which keeps each (bucket, key)'s newest row and drops
--                deletions.
--
-- The view stays the source for one request's records (`/api/lifecycles/:id`): it is always current.

CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_records{{local}} {{on_cluster}}
ENGINE = {{replacing}}(computed_at, is_deleted)
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (bucket, cluster, request_id, generation)
TTL toDateTime(bucket) + INTERVAL {{ttl_days}} DAY
EMPTY AS
SELECT toStartOfHour(first_seen) AS bucket, *, now64(9) AS computed_at, toUInt8(0) AS is_deleted
FROM {{db}}.lifecycles;

ALTER TABLE {{db}}.lifecycle_records{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS last_seen_range last_seen TYPE minmax GRANULARITY 1;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_records {{on_cluster}} AS {{db}}.lifecycle_records{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_records{{local}}, cityHash64(cluster, request_id));

-- The rows one computation writes: the live record in its first_seen hour, and deletions for every later hour its
-- spans reach (where an earlier computation may have put it). Read with a filter on the lifecycle key: it reaches
-- the states' primary key through both views.
CREATE VIEW IF NOT EXISTS {{db}}.lifecycle_record_rows{{local}} {{on_cluster}} AS
SELECT hour AS bucket, * EXCEPT (hour), now64(9) AS computed_at, toUInt8(hour != toStartOfHour(first_seen)) AS is_deleted
FROM
(
    SELECT *, arrayJoin(arrayMap(k -> toStartOfHour(first_seen) + toIntervalHour(k),
        range(toUInt32(1 + least(48, dateDiff('hour', toStartOfHour(first_seen), toStartOfHour(last_seen))))))) AS hour
    FROM {{db}}.lifecycles{{local}}
) AS spread;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_record_rows {{on_cluster}} AS {{db}}.lifecycle_record_rows{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_record_rows{{local}}, cityHash64(cluster, request_id));

-- Holds still open are read over a day before a window (they pin pages without sending spans): this index lets
-- those reads skip granules without any.
ALTER TABLE {{db}}.lifecycle_records{{local}} {{on_cluster}} ADD INDEX IF NOT EXISTS resolution_set resolution TYPE set(8) GRANULARITY 1;
