-- name: generic_late_write_victims
-- purpose: late_write_victims asked of the OpenTelemetry Collector ClickHouse exporter's otel_traces (the generic stack): every page a successful write landed on after its lifecycle's release, and the lifecycle that owned the page when it landed (the latest allocation of it on that decode engine, between the writer's release and the landing, still unreleased then).
-- param from DateTime64(9, 'UTC'): start of the range: late writes landing at or after it
-- param to DateTime64(9, 'UTC'): end of the range: late writes posted at or before it
-- param cluster String = '': one cluster, or all when empty
-- param span_reach_minutes UInt32 = 10: the writers' transfers and releases are read from this long before the range (a lifecycle lasts seconds)
-- columns: cluster, request_id, generation, rank, chunk_index, landed_at, decode_engine, page, victim_request_id, victim_generation (victim_request_id is empty when the page was free)
--
-- late_write_victims asks for the late-writing lifecycles seen in the range (first span at or before its end, last at
-- or after its start); without lifecycle records, the late writes posted by its end and landed from its start. The
-- same rows over a range that holds the writers' whole lifecycles. The owners are as late_write_victims finds them:
-- an allocation is a lifecycle's first pd.kv.alloc span, its release its first pd.release span.
WITH
    {from:DateTime64(9, 'UTC')} - toIntervalMinute({span_reach_minutes:UInt32}) AS read_from,
    -- Every page written late, computed once (a named subquery would run again at each use): (cluster, request id,
    -- generation, rank, chunk, landed at, decode engine, page, writer released at).
    (
        SELECT groupArray((cluster, request_id, generation, w.1, w.2, w.3, w.4, page, released_at))
        FROM
        (
            SELECT
                if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
                SpanAttributes['pd.request.id'] AS request_id,
                toUInt32(SpanAttributes['pd.request.generation']) AS generation,
                countIf(SpanName = 'pd.release') AS releases,
                minIf(Timestamp, SpanName = 'pd.release') AS released_at,
                -- (rank, chunk, landed at, decode engine, pages, posted at). The tuple is computed for the release
                -- rows too, which have no pd.rank (the map gives ''): OrZero parses those, and the If drops them.
                groupArrayIf((toInt32OrZero(SpanAttributes['pd.rank']), toInt32OrZero(SpanAttributes['pd.chunk.index']),
                    addNanoseconds(Timestamp, Duration), SpanAttributes['pd.decode.engine.id'], SpanAttributes['pd.kv.pages'], Timestamp),
                    SpanName = 'pd.transfer' AND SpanAttributes['pd.transfer.status'] = 'ok') AS writes
            FROM {db:Identifier}.otel_traces
            WHERE SpanName IN ('pd.transfer', 'pd.release')
              AND Timestamp >= read_from
            GROUP BY cluster, request_id, generation
            HAVING releases > 0 AND ({cluster:String} = '' OR cluster = {cluster:String})
        ) AS lifecycles
        ARRAY JOIN writes AS w
        ARRAY JOIN JSONExtract(w.5, 'Array(UInt32)') AS page
        WHERE w.3 > released_at
          AND w.3 >= {from:DateTime64(9, 'UTC')}
          AND w.6 <= {to:DateTime64(9, 'UTC')}
    ) AS late_pages,
    arrayMin(arrayMap(x -> x.9, late_pages)) AS earliest_release,
    arrayMax(arrayMap(x -> x.6, late_pages)) AS latest_landing
SELECT
    w.cluster AS cluster,
    w.request_id AS request_id,
    w.generation AS generation,
    w.rank AS rank,
    w.chunk_index AS chunk_index,
    w.landed_at AS landed_at,
    w.decode_engine AS decode_engine,
    w.page AS page,
    if(o.owner_request_id = '' OR o.allocated_at < w.released_at OR (o.owner_request_id = w.request_id AND o.owner_generation = w.generation)
        OR o.owner_released_at <= w.landed_at, '', o.owner_request_id) AS victim_request_id,
    if(victim_request_id = '', 0, o.owner_generation) AS victim_generation
FROM
(
    SELECT x.1 AS cluster, x.2 AS request_id, x.3 AS generation, x.4 AS rank, x.5 AS chunk_index, x.6 AS landed_at, x.7 AS decode_engine,
        x.8 AS page, x.9 AS released_at
    FROM (SELECT arrayJoin(late_pages) AS x)
) AS w
ASOF LEFT JOIN
(
    -- The allocations from the earliest writer's release to the latest landing, of the pages written late, each with
    -- its lifecycle's release (none: never).
    SELECT cluster, decode_engine, page, allocated_at, owner_request_id, owner_generation, owner_released_at
    FROM
    (
        SELECT
            if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
            SpanAttributes['pd.request.id'] AS owner_request_id,
            toUInt32(SpanAttributes['pd.request.generation']) AS owner_generation,
            countIf(SpanName = 'pd.kv.alloc') AS allocs,
            minIf(Timestamp, SpanName = 'pd.kv.alloc') AS allocated_at,
            argMinIf(ResourceAttributes['pd.engine.id'], (Timestamp, SpanId), SpanName = 'pd.kv.alloc') AS decode_engine,
            argMinIf(SpanAttributes['pd.kv.pages'], (Timestamp, SpanId), SpanName = 'pd.kv.alloc') AS pages,
            if(countIf(SpanName = 'pd.release') > 0, minIf(Timestamp, SpanName = 'pd.release'),
                toDateTime64('2262-01-01 00:00:00', 9, 'UTC')) AS owner_released_at
        FROM {db:Identifier}.otel_traces
        WHERE notEmpty(late_pages)
          AND ((SpanName = 'pd.kv.alloc' AND Timestamp >= earliest_release AND Timestamp <= latest_landing)
            OR (SpanName = 'pd.release' AND Timestamp >= earliest_release))
        GROUP BY cluster, owner_request_id, owner_generation
        HAVING allocs > 0
    ) AS owners
    ARRAY JOIN JSONExtract(pages, 'Array(UInt32)') AS page
    WHERE page IN (SELECT x.8 FROM (SELECT arrayJoin(late_pages) AS x))
) AS o ON w.cluster = o.cluster AND w.decode_engine = o.decode_engine AND w.page = o.page AND w.landed_at >= o.allocated_at
ORDER BY cluster, request_id, generation, landed_at, rank, chunk_index, page
