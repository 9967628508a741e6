-- name: transfer_tails
-- purpose: Transfer tails (last successful write completion minus ABORT) per prefill engine and backend, or per pairing (prefill engine, decode engine, backend), against the hold timeout: quantiles for the long_transfer_tail detection, the tail gauges and the tail chart.
-- param from DateTime64(9, 'UTC'): holds starting in this time's minute or after it
-- param to DateTime64(9, 'UTC'): holds starting in this time's minute or before it (whole minutes: the window is widened to the minutes it touches)
-- param cluster String = '': one cluster, or all when empty
-- param by_decode_engine UInt8 = 0: 1 for one row per pairing, each against its own decode engine's hold timeout (the long_transfer_tail detection and the tail gauges: a pairing with a short timeout does not hide behind another's long one); 0 for one row per prefill engine and backend with decode_engine '' (the tail chart)
-- columns: cluster, prefill_engine, decode_engine, backend, holds, p50_ms, p90_ms, p99_ms, max_ms, timeout_ms (the largest hold timeout of these holds), over_timeout (tails longer than their own hold's timeout)
SELECT
    cluster,
    prefill_engine,
    decode_engine,
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
    -- Per prefill engine and backend: one tail per hold and prefill engine, from the hold minutes (migration 0010),
    -- about one row a minute.
    SELECT cluster, t.prefill_engine AS prefill_engine, '' AS decode_engine, t.backend AS backend, t.tail_ms AS tail,
        t.hold_timeout_ms AS hold_timeout_ms
    FROM {db:Identifier}.hold_minutes FINAL
    ARRAY JOIN tails AS t
    WHERE {by_decode_engine:UInt8} = 0
      AND minute >= toStartOfMinute({from:DateTime64(9, 'UTC')})
      AND minute <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    UNION ALL
    -- Per pairing: the minutes keep no decode engine with their tails, so the held records (migration 0006) of the
    -- same whole minutes, one tail per hold and prefill engine as the minutes have them. A hold starting in a minute
    -- has its record's bucket (five minutes of its first span) at or before it, and its last span at or after it.
    SELECT cluster, p.1 AS prefill_engine, decode_engine, backend, assumeNotNull(transfer_tail_ms) AS tail, hold_timeout_ms
    FROM {db:Identifier}.lifecycle_holds FINAL
    ARRAY JOIN prefill_engines AS p
    WHERE {by_decode_engine:UInt8} = 1
      AND bucket < toStartOfMinute({to:DateTime64(9, 'UTC')}) + INTERVAL 1 MINUTE
      AND last_seen >= toStartOfMinute({from:DateTime64(9, 'UTC')})
      AND hold_start >= toStartOfMinute({from:DateTime64(9, 'UTC')})
      AND hold_start < toStartOfMinute({to:DateTime64(9, 'UTC')}) + INTERVAL 1 MINUTE
      AND transfer_tail_ms IS NOT NULL
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS t
GROUP BY cluster, prefill_engine, decode_engine, backend
ORDER BY cluster, prefill_engine, decode_engine, backend
