-- Migration 0010: `hold_minutes`, the held records (migration 0006) of each cluster and minute of hold start, folded
-- into one row: what two distribution queries of the on-call page (hold_resolution_groups, transfer_tails) read
-- rather than every held record of their window with FINAL. On the bench's dataset (about 95,000 holds in the last
-- hour) each took about 50 ms, most of it merging and grouping those records, on every request; from the minutes,
-- about 60 rows for an hour, about 17 ms. (kv_pinned read from such minutes took as long as from the records: its
-- time is in its window functions.)
--
-- Written by the pipeline after each record refresh (pipeline/sql/refresh_hold_minutes.sql): the minutes of the holds
-- of the lifecycles refreshed are computed again, whole, from the held records. A minute's row is replaced as a
-- unit (version computed_at, the start of the computation that wrote it): a later computation began after every
-- record refresh that finished before it, so the newest row reads every hold of its minute that any finished
-- refresh wrote. A pipeline that dies between the two statements has not committed the batch's offsets, and its
-- replay computes the minutes again.
--
--   resolution_groups  holds alike in every dimension the resolution groups read, counted
--   tails              one per hold with a transfer tail and per prefill engine of it

CREATE TABLE IF NOT EXISTS {{db}}.hold_minutes{{local}} {{on_cluster}}
(
    cluster String,
    minute DateTime('UTC'),
    computed_at DateTime64(9, 'UTC'),
    resolution_groups Array(Tuple(resolution String, decode_engine String, backend String, decode_version String, prefill_versions Array(String), holds UInt64)),
    tails Array(Tuple(prefill_engine String, backend String, tail_ms Float64, hold_timeout_ms UInt32))
)
ENGINE = {{replacing}}(computed_at)
PARTITION BY toYYYYMMDD(minute)
ORDER BY (minute, cluster)
TTL minute + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.hold_minutes {{on_cluster}} AS {{db}}.hold_minutes{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, hold_minutes{{local}}, cityHash64(cluster, minute));
