-- name: transfer_tails
-- purpose: Transfer tails (last successful write completion minus ABORT) per prefill engine and backend, against the hold timeout: quantiles for the long_transfer_tail detection and the tail chart.
-- param from DateTime64(9, 'UTC'): holds starting in this time's minute or after it
-- param to DateTime64(9, 'UTC'): holds starting in this time's minute or before it (whole minutes: the window is widened to the minutes it touches)
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, prefill_engine, backend, holds, p50_ms, p90_ms, p99_ms, max_ms, timeout_ms (the largest hold timeout of these holds), over_timeout (tails longer than their own hold's timeout)
SELECT
    cluster,
    prefill_engine,
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
    -- One tail per hold and prefill engine, from the hold minutes (migration 0010): about one row a minute.
    SELECT cluster, t.prefill_engine AS prefill_engine, t.backend AS backend, t.tail_ms AS tail, t.hold_timeout_ms AS hold_timeout_ms
    FROM {db:Identifier}.hold_minutes FINAL
    ARRAY JOIN tails AS t
    WHERE minute >= toStartOfMinute({from:DateTime64(9, 'UTC')})
      AND minute <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS t
GROUP BY cluster, prefill_engine, backend
ORDER BY cluster, prefill_engine, backend
