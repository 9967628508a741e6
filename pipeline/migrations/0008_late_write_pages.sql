-- Migration 0008: `late_write_pages`, every successful write that landed after its lifecycle's release, with the
-- pages it wrote.
--
-- late_write_victims used to find the pages of the writes it judges in `spans`: about 40 ms of its 95 at 760 k
-- lifecycles an hour, because each writer's lookup reads whole granules of every span's pages. The late writes are
-- a few thousand rows an hour (8,456 in two hours of 760 k lifecycles), so their pages are kept here.
--
-- Filled by a materialized view on every INSERT into lifecycle_records (the pipeline's refreshes and rebuilds): for
-- the records in the inserted block that have late writes, their writes that completed after the record's release,
-- looked up in `spans` by lifecycle key. A materialized view's reads of its source table read the inserted block,
-- so the lookup reads the spans of those few lifecycles only (and none when the block has no late writer). A
-- release only moves earlier as spans arrive, so a lifecycle's late writes only grow, and every record computed
-- after a new release or a new write captures them again. Rows are identified by the writing span: a record
-- computed again, or a replayed batch, writes the same rows.

CREATE TABLE IF NOT EXISTS {{db}}.late_write_pages{{local}} {{on_cluster}}
(
    cluster LowCardinality(String),
    request_id String,
    generation UInt32,
    span_id String,
    rank Int32,
    chunk_index Int32,
    landed_at DateTime64(9, 'UTC'),
    decode_engine LowCardinality(String),
    pages Array(UInt32)
)
ENGINE = {{replacing}}
PARTITION BY toYYYYMMDD(landed_at)
ORDER BY (cluster, request_id, generation, span_id)
TTL toDateTime(landed_at) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.late_write_pages {{on_cluster}} AS {{db}}.late_write_pages{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, late_write_pages{{local}}, cityHash64(cluster, request_id));

-- A cluster shards spans and records by the same key, so a shard's records find their spans on the shard. Every span
-- of a lifecycle starts within its first and last seen: the bounds prune the spans' partitions and parts.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.late_write_pages_mv{{local}} {{on_cluster}} TO {{db}}.late_write_pages{{local}} AS
SELECT s.cluster AS cluster, s.request_id AS request_id, s.generation AS generation, s.span_id AS span_id, s.rank AS rank,
    s.chunk_index AS chunk_index, s.end_time AS landed_at, toString(s.decode_engine_id) AS decode_engine, s.pages AS pages
FROM {{db}}.lifecycle_records{{local}} AS r
INNER JOIN
(
    SELECT cluster, request_id, generation, span_id, rank, chunk_index, end_time, decode_engine_id, pages
    FROM {{db}}.spans{{local}}
    WHERE (cluster, request_id, generation) IN
          (SELECT cluster, request_id, generation FROM {{db}}.lifecycle_records{{local}} WHERE late_writes > 0 AND is_deleted = 0)
      AND start_time >= (SELECT min(first_seen) FROM {{db}}.lifecycle_records{{local}} WHERE late_writes > 0 AND is_deleted = 0)
      AND start_time <= (SELECT max(last_seen) FROM {{db}}.lifecycle_records{{local}} WHERE late_writes > 0 AND is_deleted = 0)
      AND name = 'pd.transfer' AND transfer_status = 'ok'
) AS s ON s.cluster = r.cluster AND s.request_id = r.request_id AND s.generation = r.generation
WHERE r.late_writes > 0 AND r.is_deleted = 0 AND s.end_time > assumeNotNull(r.release_at);

-- The late writes stored before this migration: the flagged records name every late writer (0004). Through the
-- plain names, which in a cluster are the Distributed tables (an INSERT runs on one node), as the record rebuilds do.
-- On a database whose records are computed again after this run (from before 0006), the view above fills it. Spans
-- and flagged records share their sharding key, so on a cluster each shard joins its own (distributed_product_mode
-- 'local'; no effect on one node).
INSERT INTO {{db}}.late_write_pages
SELECT s.cluster, s.request_id, s.generation, s.span_id, s.rank, s.chunk_index, s.end_time AS landed_at, toString(s.decode_engine_id) AS decode_engine, s.pages
FROM {{db}}.spans AS s
INNER JOIN
(
    SELECT cluster, request_id, generation, assumeNotNull(release_at) AS released_at
    FROM {{db}}.lifecycle_flags FINAL
    WHERE late_writes > 0
) AS w ON s.cluster = w.cluster AND s.request_id = w.request_id AND s.generation = w.generation
WHERE s.name = 'pd.transfer' AND s.transfer_status = 'ok' AND s.end_time > w.released_at
SETTINGS distributed_product_mode = 'local';
