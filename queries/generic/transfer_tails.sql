-- name: generic_transfer_tails
-- purpose: transfer_tails asked of the OpenTelemetry Collector ClickHouse exporter's otel_traces (the generic stack): per prefill engine and backend, or per pairing, the transfer tails (last successful write completion minus ABORT) of the holds started in the window's whole minutes, against their hold timeouts.
-- param from DateTime64(9, 'UTC'): holds starting in this time's minute or after it
-- param to DateTime64(9, 'UTC'): holds starting in this time's minute or before it (whole minutes, as transfer_tails)
-- param cluster String = '': one cluster, or all when empty
-- param by_decode_engine UInt8 = 0: 1 for one row per pairing (prefill engine, decode engine, backend); 0 for one row per prefill engine and backend with decode_engine ''
-- param span_reach_minutes UInt32 = 10: a held lifecycle's transfers and drains are read from this long before the window (a lifecycle lasts seconds; its writes may complete any time after)
-- columns: cluster, prefill_engine, decode_engine, backend, holds, p50_ms, p90_ms, p99_ms, max_ms, timeout_ms, over_timeout
--
-- As holdscope defines them (pipeline/migrations/0002, 0010): a hold's tail is its lifecycle's last successful
-- write's end (start + duration) minus its first hold span's start, in ms, for holds with a successful write; it
-- counts once per prefill engine that sent the lifecycle a transfer or drain span; the backend is the lifecycle's
-- (the largest of its engines'); the decode engine the hold's. Quantiles with quantileExact, as transfer_tails.
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
    SELECT
        cluster,
        arrayJoin(prefill_engines) AS prefill_engine,
        if({by_decode_engine:UInt8} = 1, hold_engine, '') AS decode_engine,
        backend,
        (last_ok_end_ns - toUnixTimestamp64Nano(hold_start)) / 1e6 AS tail,
        hold_timeout_ms
    FROM
    (
        SELECT
            if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
            SpanAttributes['pd.request.id'] AS request_id,
            SpanAttributes['pd.request.generation'] AS generation,
            countIf(SpanName = 'pd.hold') AS hold_spans,
            minIf(Timestamp, SpanName = 'pd.hold') AS hold_start,
            argMinIf(ResourceAttributes['pd.engine.id'], (Timestamp, SpanId), SpanName = 'pd.hold') AS hold_engine,
            argMinIf(toUInt32OrZero(SpanAttributes['pd.hold.timeout_ms']), (Timestamp, SpanId), SpanName = 'pd.hold') AS hold_timeout_ms,
            countIf(SpanName = 'pd.transfer' AND SpanAttributes['pd.transfer.status'] = 'ok') AS ok_writes,
            maxIf(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration),
                SpanName = 'pd.transfer' AND SpanAttributes['pd.transfer.status'] = 'ok') AS last_ok_end_ns,
            groupUniqArrayIf(ResourceAttributes['pd.engine.id'], ResourceAttributes['pd.role'] = 'prefill') AS prefill_engines,
            max(ResourceAttributes['pd.transfer.backend']) AS backend
        FROM {db:Identifier}.otel_traces
        WHERE SpanName IN ('pd.hold', 'pd.transfer', 'pd.drain')
          AND Timestamp >= toStartOfMinute({from:DateTime64(9, 'UTC')}) - toIntervalMinute({span_reach_minutes:UInt32})
        GROUP BY cluster, request_id, generation
        HAVING hold_spans > 0
           AND ok_writes > 0
           AND hold_start >= toStartOfMinute({from:DateTime64(9, 'UTC')})
           AND hold_start < toStartOfMinute({to:DateTime64(9, 'UTC')}) + INTERVAL 1 MINUTE
           AND ({cluster:String} = '' OR cluster = {cluster:String})
    ) AS lifecycles
) AS tails
GROUP BY cluster, prefill_engine, decode_engine, backend
ORDER BY cluster, prefill_engine, decode_engine, backend
