-- name: resolution_mix
-- purpose: How holds resolved (drained, timeout, still open) per decode engine over time, with the timeout share.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param bucket_seconds UInt32 = 60: width of a time bucket
-- columns: cluster, decode_engine, bucket, holds, drained, timeouts, open, timeout_share
SELECT
    cluster,
    decode_engine,
    toStartOfInterval(assumeNotNull(hold_start), toIntervalSecond({bucket_seconds:UInt32})) AS bucket,
    count() AS holds,
    countIf(resolution = 'drained') AS drained,
    countIf(resolution = 'timeout') AS timeouts,
    countIf(resolution = 'open') AS open,
    if(drained + timeouts = 0, 0, timeouts / (drained + timeouts)) AS timeout_share
FROM {db:Identifier}.lifecycle_holds FINAL
-- A hold in the range means a lifecycle active in it: the first two conditions let ClickHouse skip the rest.
WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
  AND hold_start IS NOT NULL
  AND hold_start >= {from:DateTime64(9, 'UTC')}
  AND hold_start <= {to:DateTime64(9, 'UTC')}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
GROUP BY cluster, decode_engine, bucket
ORDER BY bucket, cluster, decode_engine
