-- Migration 0011: `span_dead_letters`, the span rows ClickHouse refused for their content (a timestamp past
-- DateTime64(9)'s year 2262, a value a constraint refuses), kept with the error instead of blocking the rows around
-- them. The writer (pipeline/writer.ts) splits a refused INSERT until each refused row failed on its own, stores the
-- other rows in `spans` and these here, and only then lets the batch's Kafka offsets move on.
--
--   row            the TabSeparated line as the writer sent it (SPAN_COLUMNS order, no newline): what a replay
--                  inserts again, e.g. `SELECT row ... FORMAT TSVRaw` piped into `INSERT INTO spans (...) FORMAT TSV`
--   columns        the same row as column name -> field text, for reading (arrays as their text)
--   cluster ... span_id   the row's identity, unescaped, for lookups by lifecycle
--   error_code, error_name, error_message   ClickHouse's answer to the row inserted on its own
--
-- A batch read again after a crash (between dead-lettering and the offset commit) dead-letters the same rows again:
-- rows are identified by the span and the line's hash, so copies of the same day fold into one (read with FINAL). No
-- alert reads this table; the alert on holdscope_pipeline_dead_letter_rows_total fires on any increase, which copies
-- only make larger.

CREATE TABLE IF NOT EXISTS {{db}}.span_dead_letters{{local}} {{on_cluster}}
(
    dead_at DateTime64(3, 'UTC') DEFAULT now64(3),
    cluster String,
    request_id String,
    generation String,
    name String,
    trace_id String,
    span_id String,
    columns Map(String, String),
    row String,
    error_code UInt32,
    error_name LowCardinality(String),
    error_message String
)
ENGINE = {{replacing}}(dead_at)
PARTITION BY toYYYYMMDD(dead_at)
ORDER BY (cluster, request_id, generation, name, trace_id, span_id, cityHash64(row))
TTL toDateTime(dead_at) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.span_dead_letters {{on_cluster}} AS {{db}}.span_dead_letters{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, span_dead_letters{{local}}, cityHash64(cluster, request_id));
