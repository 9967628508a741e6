-- Migration 0009: `page_allocations`, each stored record's KV allocation (decode engine, time, pages, release) in
-- the order of its allocation time, for the owners' lookup of late_write_victims.
--
-- That lookup needs the allocations of a stretch of a minute or two (from the writers' release to their landing).
-- The stored records are ordered by the five minutes of first_seen and then by request id, so the stretch's
-- records are spread over every granule of two buckets: at 875 k lifecycles an hour the lookup read 150 k records'
-- pages (about 26 M page numbers) to keep 25 k records. Here they are contiguous.
--
-- Filled by a materialized view on every INSERT into lifecycle_records: its live rows (is_deleted = 0) that have an
-- allocation. A record's allocation is its earliest `pd.kv.alloc` span, which a lifecycle has one of, so a record
-- computed again keeps its allocation time and replaces its row here (the newest computation wins, as in the
-- records): the release it carries is the newest. A lifecycle with two allocation spans whose earlier one arrives
-- last would keep a row for each; the later one is an allocation that did happen, with the release known then.

CREATE TABLE IF NOT EXISTS {{db}}.page_allocations{{local}} {{on_cluster}}
(
    allocated_at DateTime64(9, 'UTC'),
    cluster LowCardinality(String),
    request_id String,
    generation UInt32,
    decode_engine LowCardinality(String),
    release_at Nullable(DateTime64(9, 'UTC')),
    kv_pages Array(UInt32),
    computed_at DateTime64(9)
)
ENGINE = {{replacing}}(computed_at)
PARTITION BY toYYYYMMDD(allocated_at)
ORDER BY (allocated_at, cluster, request_id, generation)
TTL toDateTime(allocated_at) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.page_allocations {{on_cluster}} AS {{db}}.page_allocations{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, page_allocations{{local}}, cityHash64(cluster, request_id));

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.page_allocations_mv{{local}} {{on_cluster}} TO {{db}}.page_allocations{{local}} AS
SELECT assumeNotNull(allocated_at) AS allocated_at, cluster, request_id, generation, decode_engine, release_at, kv_pages, computed_at
FROM {{db}}.lifecycle_records{{local}}
WHERE is_deleted = 0 AND allocated_at IS NOT NULL;

-- The allocations of the records stored before this migration, in one pass over them. Through the plain names, which
-- in a cluster are the Distributed tables, as 0008's backfill.
INSERT INTO {{db}}.page_allocations
SELECT assumeNotNull(allocated_at) AS allocated_at, cluster, request_id, generation, decode_engine, release_at, kv_pages, computed_at
FROM {{db}}.lifecycle_records FINAL
WHERE allocated_at IS NOT NULL;
