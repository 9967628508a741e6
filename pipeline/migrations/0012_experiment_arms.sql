-- Migration 0012: experiment arms. Engines may label their resource with `pd.experiment.arm` (e.g. `baseline`,
-- `fix`) and `pd.experiment.run` (e.g. `run-3`); spans keep both, and `lifecycle_arms` holds each lifecycle's, which
-- are its decode engine's, so that `compare` can summarize each run and compare arms across runs.
--
-- A side table rather than two more columns on the lifecycle states and records: those would change the states' and
-- records' materialized views, the records' computation and every view and table built on them (flags, holds, late
-- writes, allocations, hold minutes), and ask for a rebuild of every stored record. This is additive: it costs one
-- row per lifecycle and insert block, and only for spans that carry an arm or a run (a deployment in no experiment
-- writes nothing here). Spans stored before this migration carry no labels, so there is nothing to backfill.
--
-- Filled by a materialized view on every INSERT into spans: the decode engine's spans that carry an arm or a run,
-- grouped by lifecycle key. A lifecycle's spans come in several blocks, so a key has several rows until merges fold
-- them (min and max are idempotent: a replayed span changes nothing). Those rows may even sit in different
-- partitions (a lifecycle across midnight, a late span that moves first_seen earlier), which merges never fold;
-- readers therefore always GROUP BY (cluster, request_id, generation) with max(experiment_arm), max(experiment_run),
-- or select keys with `(cluster, request_id, generation) IN (SELECT ... WHERE experiment_arm = ...)`, both of which
-- are right whatever the rows. first_seen is the earliest labelled decode span, a little after the lifecycle's own
-- first_seen (the router's admission comes first): it bounds the partitions a window's read needs (with a margin),
-- it is not the lifecycle's start. A decode engine relabelled within one lifecycle would leave the larger label.

ALTER TABLE {{db}}.spans{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS experiment_arm LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS experiment_run LowCardinality(String) DEFAULT '';

-- The Distributed table was created AS the local one (0001) and does not follow its changes: the pipeline inserts
-- through it, so it needs the columns too.
-- @cluster-only
ALTER TABLE {{db}}.spans {{on_cluster}}
    ADD COLUMN IF NOT EXISTS experiment_arm LowCardinality(String) DEFAULT '',
    ADD COLUMN IF NOT EXISTS experiment_run LowCardinality(String) DEFAULT '';

CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_arms{{local}} {{on_cluster}}
(
    cluster LowCardinality(String),
    request_id String,
    generation UInt32,
    first_seen SimpleAggregateFunction(min, DateTime64(9, 'UTC')),
    experiment_arm SimpleAggregateFunction(max, String),
    experiment_run SimpleAggregateFunction(max, String)
)
ENGINE = {{aggregating}}
PARTITION BY toYYYYMMDD(first_seen)
ORDER BY (cluster, request_id, generation)
TTL toDateTime(first_seen) + INTERVAL {{ttl_days}} DAY;

-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycle_arms {{on_cluster}} AS {{db}}.lifecycle_arms{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycle_arms{{local}}, cityHash64(cluster, request_id));

-- Spans and arms share their sharding key, so each shard's spans fill that shard's arms. The inner query renames the
-- labels: the output aliases would otherwise shadow the span columns in its WHERE.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.lifecycle_arms_mv{{local}} {{on_cluster}} TO {{db}}.lifecycle_arms{{local}} AS
SELECT cluster, request_id, generation, min(start_time) AS first_seen, max(arm) AS experiment_arm, max(run) AS experiment_run
FROM
(
    SELECT cluster, request_id, generation, start_time, toString(experiment_arm) AS arm, toString(experiment_run) AS run
    FROM {{db}}.spans{{local}}
    WHERE engine_role = 'decode' AND (experiment_arm != '' OR experiment_run != '')
)
GROUP BY cluster, request_id, generation;
