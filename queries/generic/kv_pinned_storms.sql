-- name: generic_kv_pinned_storms
-- purpose: kv_pinned asked of the OpenTelemetry Collector ClickHouse exporter's otel_traces (the generic stack): per decode engine and 10-second window, the holds started (aborts) and the peak KV slots pinned by holds (sampled each second), for the abort-storm rule (queries/storms.ts) to judge.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param open_lookback_hours UInt32 = 1: holds (and their releases) are read from this long before the range: a hold still open pins slots from its start (for at most a day)
-- param baseline_lookback_seconds UInt32 = 0: aborts are also counted this long before the range, so the storm baseline of the range's first windows is complete (queries/storms.ts)
-- param span_reach_minutes UInt32 = 10: lifecycles are read from this long before the aborts to this long after the range, so each is seen whole (a lifecycle lasts seconds)
-- columns: cluster, decode_engine, window_start, aborts, peak_pinned_slots, capacity_slots, engine_since (the earliest first span of a lifecycle of this decode engine, aborted or not, from baseline_lookback_seconds before the range: the storm warm-up's start; null when none)
--
-- A hold pins its pd.kv.slots from the second after its first hold span to the second of its lifecycle's first release
-- (no release: to now, for at most a day), as kv_pinned counts them. The pinned level is summed second by second over
-- every hold of an engine: the generic store has no lifecycle record to take a hold's slots and release from, so the
-- holds are put together from their hold and release spans first.
WITH
    toInt64(ceil(toUnixTimestamp64Milli({from:DateTime64(9, 'UTC')}) / 1000)) AS first_second,
    intDiv(toUnixTimestamp64Milli({to:DateTime64(9, 'UTC')}), 1000) AS last_second,
    {from:DateTime64(9, 'UTC')} - toIntervalHour({open_lookback_hours:UInt32}) AS read_from,
    {from:DateTime64(9, 'UTC')} - toIntervalSecond({baseline_lookback_seconds:UInt32}) AS aborts_from
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
        -- Every second of the range some hold pinned slots in, with the slots pinned then.
        SELECT cluster, decode_engine, toDateTime(intDiv(second, 10) * 10, 'UTC') AS window_start, 0 AS aborts,
            sum(slots) AS pinned, max(capacity) AS capacity
        FROM
        (
            SELECT cluster, decode_engine, slots, engine_capacity AS capacity,
                arrayJoin(range(greatest(start_second + 1, first_second), least(end_second, last_second) + 1)) AS second
            FROM
            (
                SELECT
                    if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
                    SpanAttributes['pd.request.id'] AS request_id,
                    SpanAttributes['pd.request.generation'] AS generation,
                    countIf(SpanName = 'pd.hold') AS hold_spans,
                    argMinIf(ResourceAttributes['pd.engine.id'], (Timestamp, SpanId), SpanName = 'pd.hold') AS decode_engine,
                    argMinIf(toUInt32OrZero(ResourceAttributes['pd.kv.capacity_slots']), (Timestamp, SpanId), SpanName = 'pd.hold') AS capacity,
                    argMinIf(toInt64OrZero(SpanAttributes['pd.kv.slots']), (Timestamp, SpanId), SpanName = 'pd.hold') AS slots,
                    minIf(Timestamp, SpanName = 'pd.hold') AS hold_start,
                    if(countIf(SpanName = 'pd.release') > 0, minIf(Timestamp, SpanName = 'pd.release'), now64(9)) AS ended_at,
                    toInt64(toUnixTimestamp(hold_start)) AS start_second,
                    least(start_second + 86400, toInt64(toUnixTimestamp(ended_at))) AS end_second,
                    -- As kv_pinned: the engine's capacity is the largest of all its holds overlapping the range.
                    max(capacity) OVER (PARTITION BY cluster, decode_engine) AS engine_capacity
                FROM {db:Identifier}.otel_traces
                WHERE SpanName IN ('pd.hold', 'pd.release')
                  AND Timestamp >= read_from
                GROUP BY cluster, request_id, generation
                HAVING hold_spans > 0
                   AND hold_start <= {to:DateTime64(9, 'UTC')}
                   AND ended_at >= {from:DateTime64(9, 'UTC')}
                   AND end_second > start_second
                   AND ({cluster:String} = '' OR cluster = {cluster:String})
            ) AS holds
            -- A hold of no slots pins none: kv_pinned has no row for a second only such holds span.
            WHERE greatest(start_second + 1, first_second) <= least(end_second, last_second) AND slots > 0
        ) AS seconds
        GROUP BY cluster, decode_engine, second
        UNION ALL
        SELECT cluster, decode_engine, toStartOfInterval(hold_start, INTERVAL 10 SECOND) AS window_start, count() AS aborts,
            0 AS pinned, max(capacity) AS capacity
        FROM
        (
            SELECT
                if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
                SpanAttributes['pd.request.id'] AS request_id,
                SpanAttributes['pd.request.generation'] AS generation,
                argMin(ResourceAttributes['pd.engine.id'], (Timestamp, SpanId)) AS decode_engine,
                argMin(toUInt32OrZero(ResourceAttributes['pd.kv.capacity_slots']), (Timestamp, SpanId)) AS capacity,
                min(Timestamp) AS hold_start
            FROM {db:Identifier}.otel_traces
            WHERE SpanName = 'pd.hold'
              AND Timestamp >= aborts_from
              AND Timestamp <= {to:DateTime64(9, 'UTC')}
            GROUP BY cluster, request_id, generation
            HAVING ({cluster:String} = '' OR cluster = {cluster:String})
        ) AS held
        GROUP BY cluster, decode_engine, window_start
    ) AS windows
    GROUP BY cluster, decode_engine, window_start
) AS w
LEFT JOIN
(
    -- The earliest first span of a lifecycle of the engine, aborted or not, as kv_pinned's engine_since: the
    -- lifecycle's first span is the router's admission, a hop before the engine's own first span, and a lifecycle
    -- already running at aborts_from counts from aborts_from. With no lifecycle record, each lifecycle is put together
    -- from all its spans, read span_reach_minutes either side of the range: one running at aborts_from is seen from
    -- its start, and one starting by the range's end is seen with the spans that name its decode engine (its decode
    -- spans' engine, or the one its transfers and drains name).
    SELECT cluster, decode_engine, greatest(min(first_seen), aborts_from) AS engine_since
    FROM
    (
        SELECT
            if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
            SpanAttributes['pd.request.id'] AS request_id,
            SpanAttributes['pd.request.generation'] AS generation,
            toTimeZone(min(Timestamp), 'UTC') AS first_seen,
            toTimeZone(max(addNanoseconds(Timestamp, Duration)), 'UTC') AS last_seen,
            max(multiIf(ResourceAttributes['pd.role'] = 'decode', ResourceAttributes['pd.engine.id'],
                SpanName IN ('pd.transfer', 'pd.drain'), SpanAttributes['pd.decode.engine.id'], '')) AS decode_engine
        FROM {db:Identifier}.otel_traces
        WHERE Timestamp >= aborts_from - toIntervalMinute({span_reach_minutes:UInt32})
          AND Timestamp <= {to:DateTime64(9, 'UTC')} + toIntervalMinute({span_reach_minutes:UInt32})
        GROUP BY cluster, request_id, generation
        HAVING decode_engine != ''
           AND last_seen >= aborts_from
           AND first_seen <= {to:DateTime64(9, 'UTC')}
           AND ({cluster:String} = '' OR cluster = {cluster:String})
    ) AS lifecycles
    GROUP BY cluster, decode_engine
) AS s ON s.cluster = w.cluster AND s.decode_engine = w.decode_engine
ORDER BY cluster, decode_engine, window_start
SETTINGS join_use_nulls = 1
