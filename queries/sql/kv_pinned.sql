-- name: kv_pinned
-- purpose: Per decode engine and 10-second window: aborts (holds started) and the peak KV slots pinned by holds (sampled each second) against the engine's capacity, for the kv_capacity_exhaustion detection and the KV chart.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param open_lookback_hours UInt32 = 1: holds still open count when they started up to this long before the range (and for at most a day after their start)
-- param with_aborts_only UInt8 = 0: 1 for only the windows in which holds started, all the storm detection needs (a window without aborts is never a storm and counts as zero in a trailing median); a hold left open pins slots in every window of a day, which would otherwise be a row each
-- param baseline_lookback_seconds UInt32 = 0: aborts are also read this long before the range (rows with aborts only, no pinned slots), so the storm baseline (queries/storms.ts) of the range's first windows is complete: the storm detection passes stormTrailingWindows windows
-- columns: cluster, decode_engine, window_start, aborts, peak_pinned_slots, capacity_slots, engine_since (the earliest first span of a lifecycle of this decode engine, aborted or not, from baseline_lookback_seconds before the range: the storm warm-up's start; null when none)
SELECT
    w.cluster AS cluster,
    w.decode_engine AS decode_engine,
    w.window_start AS window_start,
    w.aborts AS aborts,
    w.peak_pinned_slots AS peak_pinned_slots,
    w.capacity_slots AS capacity_slots,
    s.engine_since AS engine_since
FROM
(
SELECT
    cluster,
    decode_engine,
    window_start,
    sum(aborts) AS aborts,
    max(pinned) AS peak_pinned_slots,
    max(capacity) AS capacity_slots
FROM
(
    -- The slots pinned at each whole second, as a hold pins them from the second after its start to the second of
    -- its release (open holds: to now, for at most a day): the level only changes where a hold starts or ends, so
    -- each stretch between two such seconds counts once in every 10-second window it reaches, rather than once per
    -- second per hold.
    SELECT cluster, decode_engine, toDateTime(window_second, 'UTC') AS window_start, 0 AS aborts, level AS pinned, capacity
    FROM
    (
        SELECT cluster, decode_engine, level, capacity,
            arrayJoin(range(intDiv(greatest(t, first_second), 10) * 10, intDiv(least(next_t - 1, last_second), 10) * 10 + 1, 10)) AS window_second
        FROM
        (
            SELECT cluster, decode_engine, t,
                sum(delta) OVER (PARTITION BY cluster, decode_engine ORDER BY t ROWS UNBOUNDED PRECEDING) AS level,
                leadInFrame(t, 1, t + 1) OVER (PARTITION BY cluster, decode_engine ORDER BY t ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS next_t,
                max(capacity) OVER (PARTITION BY cluster, decode_engine) AS capacity,
                toInt64(ceil(toUnixTimestamp64Milli({from:DateTime64(9, 'UTC')}) / 1000)) AS first_second,
                intDiv(toUnixTimestamp64Milli({to:DateTime64(9, 'UTC')}), 1000) AS last_second
            FROM
            (
                SELECT cluster, decode_engine, change.1 AS t, sum(change.2) AS delta, max(capacity_slots) AS capacity
                FROM
                (
                    -- A released hold overlapping the range has its last span in it or after; an open one pins pages up
                    -- to now (for at most a day after its start), and counts when it started up to open_lookback_hours
                    -- before the range. Two disjoint reads rather than one OR, so each prunes by its own bounds.
                    SELECT cluster, decode_engine, capacity_slots, toInt64(held_slots) AS slots,
                        toInt64(toUnixTimestamp(assumeNotNull(hold_start))) AS start_second,
                        least(start_second + 86400, toInt64(toUnixTimestamp(coalesce(release_at, now64(9))))) AS end_second
                    FROM {db:Identifier}.lifecycle_holds FINAL
                    WHERE bucket <= {to:DateTime64(9, 'UTC')}
                      AND last_seen >= {from:DateTime64(9, 'UTC')}
                      AND hold_start IS NOT NULL
                      AND hold_start <= {to:DateTime64(9, 'UTC')}
                      AND coalesce(release_at, now64(9)) >= {from:DateTime64(9, 'UTC')}
                      AND ({cluster:String} = '' OR cluster = {cluster:String})
                    UNION ALL
                    SELECT cluster, decode_engine, capacity_slots, toInt64(held_slots) AS slots,
                        toInt64(toUnixTimestamp(assumeNotNull(hold_start))) AS start_second,
                        least(start_second + 86400, toInt64(toUnixTimestamp(coalesce(release_at, now64(9))))) AS end_second
                    FROM {db:Identifier}.lifecycle_holds FINAL
                    WHERE bucket <= {to:DateTime64(9, 'UTC')}
                      AND bucket >= toStartOfFiveMinutes({from:DateTime64(9, 'UTC')} - toIntervalHour({open_lookback_hours:UInt32}))
                      AND last_seen < {from:DateTime64(9, 'UTC')}
                      AND resolution = 'open'
                      AND hold_start IS NOT NULL
                      AND ({cluster:String} = '' OR cluster = {cluster:String})
                ) AS holds
                ARRAY JOIN [(start_second + 1, slots), (end_second + 1, -slots)] AS change
                WHERE end_second > start_second
                GROUP BY cluster, decode_engine, t
            ) AS changes
        ) AS levels
        WHERE level > 0 AND greatest(t, first_second) <= least(next_t - 1, last_second)
    ) AS stretches
    UNION ALL
    SELECT cluster, decode_engine, toStartOfInterval(assumeNotNull(hold_start), INTERVAL 10 SECOND) AS window_start, count() AS aborts, 0 AS pinned, max(capacity_slots) AS capacity
    FROM {db:Identifier}.lifecycle_holds FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND last_seen >= {from:DateTime64(9, 'UTC')} - toIntervalSecond({baseline_lookback_seconds:UInt32})
      AND hold_start IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')} - toIntervalSecond({baseline_lookback_seconds:UInt32})
      AND hold_start <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, decode_engine, window_start
) AS windows
GROUP BY cluster, decode_engine, window_start
HAVING {with_aborts_only:UInt8} = 0 OR aborts > 0
) AS w
LEFT JOIN
(
    -- Every lifecycle, not only the held ones: an engine that ran without aborts is past its warm-up. Without FINAL,
    -- since first_seen only moves earlier and every version of a record carries its own: the minimum is the same.
    SELECT cluster, decode_engine,
        greatest(min(first_seen), {from:DateTime64(9, 'UTC')} - toIntervalSecond({baseline_lookback_seconds:UInt32})) AS engine_since
    FROM {db:Identifier}.lifecycle_records
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND last_seen >= {from:DateTime64(9, 'UTC')} - toIntervalSecond({baseline_lookback_seconds:UInt32})
      AND first_seen <= {to:DateTime64(9, 'UTC')}
      AND decode_engine != ''
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, decode_engine
) AS s ON s.cluster = w.cluster AND s.decode_engine = w.decode_engine
ORDER BY cluster, decode_engine, window_start
SETTINGS join_use_nulls = 1
