-- name: compare_arm
-- purpose: One arm of `holdscope compare` (queries/compare.ts): the holds starting in a window that match a selector, their resolutions, late writes and unsafe releases, and bounded uniform samples of drain times and transfer tails for the quantile intervals.
-- param from DateTime64(9, 'UTC'): holds starting at this time or after it
-- param to DateTime64(9, 'UTC'): holds starting before this time
-- param cluster String = '': one cluster, or all when empty
-- param decode_engine String = '': one decode engine, or all when empty
-- param decode_version String = '': one decode engine version, or all when empty
-- param prefill_engine String = '': holds with this engine among their prefill engines, or all when empty
-- param prefill_version String = '': holds with a prefill engine of this version, or all when empty
-- param backend String = '': one transfer backend, or all when empty
-- param arm String = '': holds whose decode engine reported this experiment arm (pd.experiment.arm), or all when empty
-- param run String = '': holds whose decode engine reported this experiment run (pd.experiment.run), or all when empty
-- param sample_size UInt32 = 20000: the most drain times and transfer tails returned (each a uniform sample of the arm's values)
-- param seed UInt64 = 1: the samples' seed, so the same data give the same answer
-- columns: holds, drained, timeouts, open, late_writes (sum over the holds), unsafe_releases (holds), tails (holds with a transfer tail), drain_sample (hold_ms of drained holds), tail_sample (transfer_tail_ms), decode_engines (the (cluster, decode engine) pairs of the holds, for the storm peaks)
SELECT
    count() AS holds,
    countIf(resolution = 'drained') AS drained,
    countIf(resolution = 'timeout') AS timeouts,
    countIf(resolution = 'open') AS open,
    sum(late_writes) AS late_writes,
    countIf(unsafe_release) AS unsafe_releases,
    countIf(transfer_tail_ms IS NOT NULL) AS tails,
    groupArraySampleIf({sample_size:UInt32}, {seed:UInt64})(assumeNotNull(hold_ms), resolution = 'drained' AND hold_ms IS NOT NULL) AS drain_sample,
    groupArraySampleIf({sample_size:UInt32}, {seed:UInt64})(assumeNotNull(transfer_tail_ms), transfer_tail_ms IS NOT NULL) AS tail_sample,
    arraySort(groupUniqArray((cluster, decode_engine))) AS decode_engines
FROM {db:Identifier}.lifecycle_holds FINAL
-- The held records (migration 0006) of the window only: a record's bucket (five minutes of its first span) is at or
-- before its hold's start, and its last span at or after it, so both bounds prune by the table's order and index.
WHERE bucket < {to:DateTime64(9, 'UTC')}
  AND last_seen >= {from:DateTime64(9, 'UTC')}
  AND hold_start >= {from:DateTime64(9, 'UTC')}
  AND hold_start < {to:DateTime64(9, 'UTC')}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
  AND ({decode_engine:String} = '' OR decode_engine = {decode_engine:String})
  AND ({decode_version:String} = '' OR decode_version = {decode_version:String})
  AND ({backend:String} = '' OR backend = {backend:String})
  AND ({prefill_engine:String} = '' OR arrayExists(p -> p.1 = {prefill_engine:String}, prefill_engines))
  AND ({prefill_version:String} = '' OR arrayExists(p -> p.2 = {prefill_version:String}, prefill_engines))
  -- The experiment labels live beside the records (migration 0012), only for lifecycles whose decode engine carries
  -- them; a lifecycle began at most a day before its hold.
  AND (({arm:String} = '' AND {run:String} = '') OR (cluster, request_id, generation) IN (
      SELECT cluster, request_id, generation
      FROM {db:Identifier}.lifecycle_arms
      WHERE first_seen < {to:DateTime64(9, 'UTC')}
        AND first_seen >= {from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
        AND ({arm:String} = '' OR experiment_arm = {arm:String})
        AND ({run:String} = '' OR experiment_run = {run:String})))
-- On a cluster both tables are sharded by the lifecycle key: each shard matches its own labels.
SETTINGS distributed_product_mode = 'local'
