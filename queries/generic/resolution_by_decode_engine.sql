-- name: generic_resolution_by_decode_engine
-- purpose: hold_resolution_groups' decode_engine rows asked of the OpenTelemetry Collector ClickHouse exporter's otel_traces (the generic stack): holds started in the window's whole minutes per decode engine, and how each ended (its lifecycle's first release: drained, any other reason, or none yet).
-- param from DateTime64(9, 'UTC'): holds starting in this time's minute or after it
-- param to DateTime64(9, 'UTC'): holds starting in this time's minute or before it (whole minutes, as hold_resolution_groups)
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, decode_engine, holds, drained, timeouts, open
--
-- One pass over the hold and release spans from the window's start on, grouped by lifecycle key: otel_traces has no
-- lifecycle record, so each question puts its lifecycles together from their spans, reading every key and value of
-- their attribute maps. A release may come any time after its hold: releases are read up to now.
SELECT
    cluster,
    decode_engine,
    count() AS holds,
    countIf(release_reason = 'drained') AS drained,
    countIf(releases > 0 AND release_reason != 'drained') AS timeouts,
    countIf(releases = 0) AS open
FROM
(
    SELECT
        if(ResourceAttributes['pd.cluster'] = '', 'default', ResourceAttributes['pd.cluster']) AS cluster,
        SpanAttributes['pd.request.id'] AS request_id,
        SpanAttributes['pd.request.generation'] AS generation,
        countIf(SpanName = 'pd.hold') AS hold_spans,
        minIf(Timestamp, SpanName = 'pd.hold') AS hold_start,
        argMinIf(ResourceAttributes['pd.engine.id'], (Timestamp, SpanId), SpanName = 'pd.hold') AS decode_engine,
        countIf(SpanName = 'pd.release') AS releases,
        argMinIf(SpanAttributes['pd.release.reason'], (Timestamp, SpanId), SpanName = 'pd.release') AS release_reason
    FROM {db:Identifier}.otel_traces
    WHERE SpanName IN ('pd.hold', 'pd.release')
      AND Timestamp >= toStartOfMinute({from:DateTime64(9, 'UTC')})
    GROUP BY cluster, request_id, generation
    HAVING hold_spans > 0
       AND hold_start < toStartOfMinute({to:DateTime64(9, 'UTC')}) + INTERVAL 1 MINUTE
       AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS lifecycles
GROUP BY cluster, decode_engine
ORDER BY cluster, decode_engine
