-- name: longest_holds
-- purpose: The longest holds of a time range (open holds count up to now), with how they ended and which ranks never acknowledged.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param limit UInt32 = 20: how many
-- columns: cluster, request_id, generation, decode_engine, hold_start, held_ms, resolution, hold_timeout_ms, expected_ranks, acked_ranks, missing_ranks, held_slots
SELECT
    cluster, request_id, generation, decode_engine, hold_start,
    coalesce(hold_ms, toFloat64(dateDiff('millisecond', assumeNotNull(hold_start), now64(9)))) AS held_ms,
    resolution, hold_timeout_ms, expected_ranks, acked_ranks, missing_ranks, held_slots
FROM {db:Identifier}.lifecycle_holds FINAL
-- A hold in the range means a lifecycle active in it: the first two conditions let ClickHouse skip the rest.
WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
  AND hold_start IS NOT NULL
  AND hold_start >= {from:DateTime64(9, 'UTC')}
  AND hold_start <= {to:DateTime64(9, 'UTC')}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY held_ms DESC, request_id, generation
LIMIT {limit:UInt32}
