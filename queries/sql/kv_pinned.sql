-- name: kv_pinned
-- purpose: Per decode engine and 10-second window: aborts (holds started) and the peak KV slots pinned by holds (sampled each second) against the engine's capacity, for the kv_capacity_exhaustion detection and the KV chart.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, decode_engine, window_start, aborts, peak_pinned_slots, capacity_slots
SELECT
    cluster,
    decode_engine,
    window_start,
    sum(aborts) AS aborts,
    max(pinned) AS peak_pinned_slots,
    max(capacity) AS capacity_slots
FROM
(
    -- Slots pinned at each whole second, summed over the holds open then.
    SELECT cluster, decode_engine, toStartOfInterval(second, INTERVAL 10 SECOND) AS window_start, 0 AS aborts, sum(held_slots) AS pinned, max(capacity_slots) AS capacity
    FROM
    (
        SELECT
            cluster, decode_engine, held_slots, capacity_slots,
            arrayJoin(arrayMap(k -> toStartOfSecond(assumeNotNull(hold_start)) + toIntervalSecond(k + 1),
                range(toUInt32(greatest(0, least(86400,
                    dateDiff('second', toStartOfSecond(assumeNotNull(hold_start)), coalesce(release_at, now64(9)))))))) ) AS second
        FROM {db:Identifier}.lifecycle_records FINAL
        -- A released hold overlapping the range has its last span in it or after; an open one pins pages up to
        -- now, and is sampled for at most a day after its start.
        WHERE bucket <= {to:DateTime64(9, 'UTC')}
          AND (last_seen >= {from:DateTime64(9, 'UTC')}
               OR (resolution = 'open' AND bucket >= toStartOfHour({from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY)))
          AND hold_start IS NOT NULL
          AND hold_start <= {to:DateTime64(9, 'UTC')}
          AND coalesce(release_at, now64(9)) >= {from:DateTime64(9, 'UTC')}
          AND ({cluster:String} = '' OR cluster = {cluster:String})
    ) AS samples
    WHERE second >= {from:DateTime64(9, 'UTC')} AND second <= {to:DateTime64(9, 'UTC')}
    GROUP BY cluster, decode_engine, second
    UNION ALL
    SELECT cluster, decode_engine, toStartOfInterval(assumeNotNull(hold_start), INTERVAL 10 SECOND) AS window_start, count() AS aborts, 0 AS pinned, max(capacity_slots) AS capacity
    FROM {db:Identifier}.lifecycle_records FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND hold_start IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')}
      AND hold_start <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, decode_engine, window_start
) AS w
GROUP BY cluster, decode_engine, window_start
ORDER BY cluster, decode_engine, window_start
