-- name: compare_runs
-- purpose: The runs of one experiment arm in `holdscope compare` (queries/compare.ts): per run (pd.experiment.run of the holds' decode engines), the holds starting in a window that match a selector, their resolutions, late writes, unsafe releases and drain and tail quantiles, so that arms are compared across runs (each run one observation), as a design of several runs per arm is.
-- param from DateTime64(9, 'UTC'): holds starting at this time or after it
-- param to DateTime64(9, 'UTC'): holds starting before this time
-- param arm String: the experiment arm (pd.experiment.arm)
-- param cluster String = '': one cluster, or all when empty
-- param decode_engine String = '': one decode engine, or all when empty
-- param decode_version String = '': one decode engine version, or all when empty
-- param prefill_engine String = '': holds with this engine among their prefill engines, or all when empty
-- param prefill_version String = '': holds with a prefill engine of this version, or all when empty
-- param backend String = '': one transfer backend, or all when empty
-- param max_runs UInt32 = 1000: runs returned at most, in run order
-- columns: run, holds, drained, timeouts, open, late_writes, unsafe_releases, drain_p50_ms, drain_p90_ms, tail_p50_ms, tail_p90_ms (null when the run has no drained hold or no tail)
SELECT
    labels.experiment_run AS run,
    count() AS holds,
    countIf(h.resolution = 'drained') AS drained,
    countIf(h.resolution = 'timeout') AS timeouts,
    countIf(h.resolution = 'open') AS open,
    sum(h.late_writes) AS late_writes,
    countIf(h.unsafe_release) AS unsafe_releases,
    quantileExactIf(0.5)(h.hold_ms, h.resolution = 'drained' AND h.hold_ms IS NOT NULL) AS drain_p50_ms,
    quantileExactIf(0.9)(h.hold_ms, h.resolution = 'drained' AND h.hold_ms IS NOT NULL) AS drain_p90_ms,
    quantileExactIf(0.5)(h.transfer_tail_ms, h.transfer_tail_ms IS NOT NULL) AS tail_p50_ms,
    quantileExactIf(0.9)(h.transfer_tail_ms, h.transfer_tail_ms IS NOT NULL) AS tail_p90_ms
FROM {db:Identifier}.lifecycle_holds AS h FINAL
INNER JOIN
(
    -- The arm's labelled lifecycles (migration 0012): a lifecycle began at most a day before its hold.
    SELECT cluster, request_id, generation, max(experiment_run) AS experiment_run
    FROM {db:Identifier}.lifecycle_arms
    WHERE first_seen < {to:DateTime64(9, 'UTC')}
      AND first_seen >= {from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
    GROUP BY cluster, request_id, generation
    HAVING max(experiment_arm) = {arm:String}
) AS labels ON labels.cluster = h.cluster AND labels.request_id = h.request_id AND labels.generation = h.generation
-- The held records of the window only, as compare_arm.sql reads them.
WHERE h.bucket < {to:DateTime64(9, 'UTC')}
  AND h.last_seen >= {from:DateTime64(9, 'UTC')}
  AND h.hold_start >= {from:DateTime64(9, 'UTC')}
  AND h.hold_start < {to:DateTime64(9, 'UTC')}
  AND ({cluster:String} = '' OR h.cluster = {cluster:String})
  AND ({decode_engine:String} = '' OR h.decode_engine = {decode_engine:String})
  AND ({decode_version:String} = '' OR h.decode_version = {decode_version:String})
  AND ({backend:String} = '' OR h.backend = {backend:String})
  AND ({prefill_engine:String} = '' OR arrayExists(p -> p.1 = {prefill_engine:String}, h.prefill_engines))
  AND ({prefill_version:String} = '' OR arrayExists(p -> p.2 = {prefill_version:String}, h.prefill_engines))
GROUP BY run
ORDER BY run
LIMIT {max_runs:UInt32}
-- On a cluster both tables are sharded by the lifecycle key: each shard matches its own labels.
SETTINGS distributed_product_mode = 'local'
