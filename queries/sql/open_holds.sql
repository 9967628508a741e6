-- name: open_holds
-- purpose: Holds still open (KV slots pinned, no release yet) per decode engine, and those open longer than their timeout plus a grace, for the open-holds gauges and alert.
-- param from DateTime64(9, 'UTC'): holds starting at or after this time
-- param to DateTime64(9, 'UTC'): holds starting at or before this time
-- param cluster String = '': one cluster, or all when empty
-- param open_hold_grace_ms UInt32 = 5000: how long past its timeout a hold may stay open before it counts as past its timeout
-- columns: cluster, decode_engine, open, open_past_timeout, held_slots, oldest_open_ms
SELECT
    cluster,
    decode_engine,
    count() AS open,
    countIf(open_ms > hold_timeout_ms + {open_hold_grace_ms:UInt32}) AS open_past_timeout,
    sum(held_slots) AS held_slots,
    max(open_ms) AS oldest_open_ms
FROM
(
    SELECT cluster, decode_engine, hold_timeout_ms, held_slots, dateDiff('millisecond', assumeNotNull(hold_start), now64(9)) AS open_ms
    FROM {db:Identifier}.lifecycle_holds FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND resolution = 'open'
      AND hold_start IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')}
      AND hold_start <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS o
GROUP BY cluster, decode_engine
ORDER BY cluster, decode_engine
