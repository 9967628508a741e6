-- Migration 0001: raw PD spans and the lifecycle records joined from them.
--
-- Templating (values come from validated configuration, never from span data):
--   {{db}}          database
--   {{on_cluster}}  '' or 'ON CLUSTER name'
--   {{local}}       '' or '_local': in cluster mode the tables below are per-shard, and Distributed
--                   tables of the plain names front them (statements marked @cluster-only)
--   {{replacing}} {{aggregating}}  MergeTree engines, Replicated* in cluster mode
--   {{ttl_days}}    retention
--
-- Replays must change nothing. Spans are deduplicated by (lifecycle key, name, trace id, span id) in a
-- ReplacingMergeTree; lifecycle states use only functions that are idempotent under duplicate rows
-- (min, max, groupUniqArrayArray of tuples that carry the span id), so a span inserted twice, in any order,
-- at any time, leaves the same record.

CREATE TABLE IF NOT EXISTS {{db}}.spans{{local}} {{on_cluster}}
(
    cluster LowCardinality(String),
    request_id String,
    generation UInt32,
    name LowCardinality(String),
    trace_id String,
    span_id String,
    start_time DateTime64(9, 'UTC'),
    end_time DateTime64(9, 'UTC'),
    engine_id LowCardinality(String),
    engine_role LowCardinality(String),
    engine_version LowCardinality(String),
    backend LowCardinality(String),
    capacity_slots UInt32,
    rank Int32 DEFAULT -1,
    chunk_index Int32 DEFAULT -1,
    pages Array(UInt32),
    slots UInt32,
    admission_outcome LowCardinality(String),
    admission_reason String,
    transfer_status LowCardinality(String),
    transfer_bytes UInt64,
    decode_engine_id LowCardinality(String),
    expected_ranks Array(UInt32),
    hold_timeout_ms UInt32,
    chunks_dropped UInt32,
    inflight UInt32,
    failed_sends UInt32,
    ack_withheld UInt8,
    ack_generation UInt32,
    ack_accepted UInt8,
    missing_ranks Array(UInt32),
    timeout_action LowCardinality(String),
    release_reason LowCardinality(String),
    checksum_outcome LowCardinality(String),
    cancel_targets Array(String),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = {{replacing}}
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (cluster, request_id, generation, name, trace_id, span_id)
TTL toDateTime(start_time) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.spans {{on_cluster}} AS {{db}}.spans{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, spans{{local}}, cityHash64(cluster, request_id));

CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_states{{local}} {{on_cluster}}
(
    cluster LowCardinality(String),
    request_id String,
    generation UInt32,
    first_seen SimpleAggregateFunction(min, DateTime64(9, 'UTC')),
    last_seen SimpleAggregateFunction(max, DateTime64(9, 'UTC')),
    decode_engine SimpleAggregateFunction(max, String),
    decode_version SimpleAggregateFunction(max, String),
    backend SimpleAggregateFunction(max, String),
    capacity_slots SimpleAggregateFunction(max, UInt32),
    prefill_engines SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(String, String, String))),
    admissions SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, String, String))),
    allocs SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, UInt32, Array(UInt32)))),
    -- (span id, posted, completed, status, rank, chunk)
    transfers SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(String, DateTime64(9, 'UTC'), DateTime64(9, 'UTC'), String, Int32, Int32))),
    handoff_at SimpleAggregateFunction(min, DateTime64(9, 'UTC')),
    -- (ABORT time, span id, expected ranks, timeout ms, slots)
    holds SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, Array(UInt32), UInt32, UInt32))),
    -- (span id, rank, failed sends, ack withheld, drain start, drain end)
    drains SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(String, Int32, UInt32, UInt8, DateTime64(9, 'UTC'), DateTime64(9, 'UTC')))),
    -- (span id, time, rank, ack generation, accepted)
    acks SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(String, DateTime64(9, 'UTC'), Int32, UInt32, UInt8))),
    -- (time, span id, missing ranks, action)
    timeouts SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, Array(UInt32), String))),
    -- (time, span id, reason)
    releases SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, String))),
    -- (time, span id, outcome)
    checksums SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9, 'UTC'), String, String))),
    cancelled_at SimpleAggregateFunction(min, DateTime64(9, 'UTC'))
)
ENGINE = {{aggregating}}
PARTITION BY toYYYYMM(first_seen)
ORDER BY (cluster, request_id, generation)
TTL toDateTime(first_seen) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_states {{on_cluster}} AS {{db}}.lifecycle_states{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_states{{local}}, cityHash64(cluster, request_id));

-- Rows without a handoff or cancel carry 2262-01-01 (near DateTime64(9)'s end) rather than the epoch, so
-- min() over real times wins; the view maps the sentinel back to NULL.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.lifecycle_states_mv{{local}} {{on_cluster}}
TO {{db}}.lifecycle_states{{local}}
AS SELECT
    cluster,
    request_id,
    generation,
    min(start_time) AS first_seen,
    max(end_time) AS last_seen,
    max(if(engine_role = 'decode', engine_id, if(name IN ('pd.transfer', 'pd.drain'), decode_engine_id, ''))) AS decode_engine,
    max(if(engine_role = 'decode', engine_version, '')) AS decode_version,
    max(if(engine_role != 'router', span_backend, '')) AS backend,
    max(if(engine_role = 'decode', capacity_slots, 0)) AS capacity_slots,
    groupUniqArrayArray(if(engine_role = 'prefill', [(toString(engine_id), toString(engine_version), toString(span_backend))], [])) AS prefill_engines,
    groupUniqArrayArray(if(name = 'pd.admission', [(start_time, span_id, toString(admission_outcome), admission_reason)], [])) AS admissions,
    groupUniqArrayArray(if(name = 'pd.kv.alloc', [(start_time, span_id, slots, pages)], [])) AS allocs,
    groupUniqArrayArray(if(name = 'pd.transfer', [(span_id, start_time, end_time, toString(transfer_status), rank, chunk_index)], [])) AS transfers,
    min(if(name = 'pd.handoff', start_time, toDateTime64('2262-01-01 00:00:00', 9, 'UTC'))) AS handoff_at,
    groupUniqArrayArray(if(name = 'pd.hold', [(start_time, span_id, expected_ranks, hold_timeout_ms, slots)], [])) AS holds,
    groupUniqArrayArray(if(name = 'pd.drain', [(span_id, rank, failed_sends, ack_withheld, start_time, end_time)], [])) AS drains,
    groupUniqArrayArray(if(name = 'pd.ack', [(span_id, start_time, rank, ack_generation, ack_accepted)], [])) AS acks,
    groupUniqArrayArray(if(name = 'pd.timeout', [(start_time, span_id, missing_ranks, toString(timeout_action))], [])) AS timeouts,
    groupUniqArrayArray(if(name = 'pd.release', [(start_time, span_id, toString(release_reason))], [])) AS releases,
    groupUniqArrayArray(if(name = 'pd.checksum', [(start_time, span_id, toString(checksum_outcome))], [])) AS checksums,
    min(if(name = 'pd.cancel', start_time, toDateTime64('2262-01-01 00:00:00', 9, 'UTC'))) AS cancelled_at
-- The rename keeps `backend` the span's column where the output alias of the same name would shadow it.
FROM (SELECT *, backend AS span_backend FROM {{db}}.spans{{local}})
GROUP BY cluster, request_id, generation;
