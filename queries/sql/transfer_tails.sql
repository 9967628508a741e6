-- name: transfer_tails
-- purpose: Transfer tails (last successful write completion minus ABORT) per prefill engine and backend, against the hold timeout: quantiles for the long_transfer_tail detection and the tail chart.
-- param from DateTime64(9, 'UTC'): holds starting at or after this time
-- param to DateTime64(9, 'UTC'): holds starting at or before this time
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, prefill_engine, backend, holds, p50_ms, p90_ms, p99_ms, max_ms, timeout_ms (the largest hold timeout of these holds), over_timeout (tails longer than their own hold's timeout)
SELECT
    cluster,
    p.1 AS prefill_engine,
    backend,
    count() AS holds,
    quantileExact(0.5)(tail) AS p50_ms,
    quantileExact(0.9)(tail) AS p90_ms,
    quantileExact(0.99)(tail) AS p99_ms,
    max(tail) AS max_ms,
    max(hold_timeout_ms) AS timeout_ms,
    countIf(tail > hold_timeout_ms) AS over_timeout
FROM
(
    SELECT cluster, backend, hold_timeout_ms, assumeNotNull(transfer_tail_ms) AS tail, arrayJoin(prefill_engines) AS p
    FROM {db:Identifier}.lifecycle_holds FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND transfer_tail_ms IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')}
      AND hold_start <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS t
GROUP BY cluster, prefill_engine, backend
ORDER BY cluster, prefill_engine, backend
