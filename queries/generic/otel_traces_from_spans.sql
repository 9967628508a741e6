-- name: generic_otel_traces_from_spans
-- purpose: fills otel_traces with the exporter's row of each stored span (the header below says how each column is made)
-- param since DateTime64(9, 'UTC') = '1970-01-01T00:00:00Z': spans starting at or after this time (a site would have stored every span; the bench fills the hours its window reads)
-- Fills `otel_traces` (otel_traces.sql) with the rows the OpenTelemetry Collector's ClickHouse exporter would have
-- written for the spans holdscope stored: how the bench and the tests put the same spans in both stores.
--
-- The exporter's mapping (exporter_traces.go, pushTraceData: one row per span, batch.Append) and where each value
-- comes from here:
--   Timestamp            span start                                  start_time
--   TraceId, SpanId      hex, lower case                             trace_id, span_id (stored as received)
--   SpanName             span name                                   name
--   Duration             end - start, nanoseconds                    end_time - start_time
--   ResourceAttributes   every resource attribute, value.AsString()  the engine columns (below)
--   SpanAttributes       every span attribute, value.AsString()      the span's own columns (below)
--   ServiceName          resource service.name                       not stored: 'pd-' || role (see below)
--   SpanKind             span.Kind().String()                        not stored: 'Internal', what emitter/instrument.ts sends
--   StatusCode/Message   status.Code().String(), status.Message()    not stored: 'Unset' and '' (the emitter sets no status)
--   ScopeName/Version    the instrumentation scope                   not stored: emitter/instrument.ts's name and version
--   ParentSpanId         hex or ''                                   not stored: '' (see below)
--   TraceState           raw                                         not stored: '' (the emitter sends none)
--   Events.*, Links.*    one element per event and link             none: the span contract carries everything in
--                                                                    attributes, and the emitter adds no event or link
-- AsString() writes integers in decimal, booleans as true/false, arrays as JSON ([1,2,3], ["a","b"]): toString,
-- 'true'/'false' and toJSONString write the same for the values the contract admits (non-negative integers, and
-- engine ids that need no JSON escaping beyond what both escape alike).
--
-- What the rebuild cannot reproduce, because holdscope does not keep it (none of it is read by the four questions,
-- which read span names, times, durations, the pd.* attributes and nothing else):
--   - service.name, and with it ServiceName: the contract identifies an engine by pd.role and pd.engine.id; 'pd-' ||
--     role is the simulator's naming (emitter/sim/engines.ts), a real site's names may differ;
--   - ParentSpanId: the simulator parents each lifecycle's spans under a remote span derived from its key; holdscope
--     keeps the trace id only;
--   - resource attributes outside the contract (an SDK's telemetry.sdk.*, host.*), pd.contract.version when sent, and
--     an optional attribute sent with the value its absence means (pd.cluster 'default', a router's or prefill's
--     pd.kv.capacity_slots 0): holdscope stores the value, not whether it was sent;
--   - a span replayed to the exporter would be a second row there; holdscope's spans table deduplicates replays.
INSERT INTO {db:Identifier}.otel_traces
(
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, ResourceAttributes, ScopeName,
    ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage, `Events.Timestamp`, `Events.Name`,
    `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`
)
SELECT
    start_time AS Timestamp,
    trace_id AS TraceId,
    span_id AS SpanId,
    '' AS ParentSpanId,
    '' AS TraceState,
    name AS SpanName,
    'Internal' AS SpanKind,
    concat('pd-', engine_role) AS ServiceName,
    -- Optional resource attributes are stored as '' (or 0) when absent, and the contract admits no empty string.
    mapFilter((k, v) -> v != '', map(
        'service.name', concat('pd-', engine_role),
        'pd.role', toString(engine_role),
        'pd.engine.id', toString(engine_id),
        'pd.engine.version', toString(engine_version),
        'pd.transfer.backend', toString(backend),
        'pd.cluster', toString(cluster),
        'pd.kv.capacity_slots', if(engine_role = 'decode' OR capacity_slots > 0, toString(capacity_slots), ''),
        'pd.experiment.arm', toString(experiment_arm),
        'pd.experiment.run', toString(experiment_run))) AS ResourceAttributes,
    -- emitter/instrument.ts's INSTRUMENTATION_NAME and INSTRUMENTATION_VERSION (the tests compare them with what it sends).
    'holdscope-emitter' AS ScopeName,
    '1.0.0' AS ScopeVersion,
    CAST(arrayConcat(
        [('pd.request.id', request_id), ('pd.request.generation', toString(generation))],
        multiIf(
            name = 'pd.admission', arrayConcat([('pd.admission.outcome', toString(admission_outcome))],
                if(admission_reason = '', [], [('pd.admission.reason', admission_reason)])),
            name = 'pd.kv.alloc', [('pd.kv.pages', toJSONString(pages)), ('pd.kv.slots', toString(slots))],
            name = 'pd.transfer', [('pd.rank', toString(rank)), ('pd.chunk.index', toString(chunk_index)),
                ('pd.kv.pages', toJSONString(pages)), ('pd.transfer.status', toString(transfer_status)),
                ('pd.transfer.bytes', toString(transfer_bytes)), ('pd.decode.engine.id', toString(decode_engine_id))],
            name = 'pd.hold', [('pd.hold.expected_ranks', toJSONString(expected_ranks)),
                ('pd.hold.timeout_ms', toString(hold_timeout_ms)), ('pd.kv.slots', toString(slots)),
                ('pd.kv.pages', toJSONString(pages))],
            name = 'pd.drain', [('pd.rank', toString(rank)), ('pd.drain.chunks_dropped', toString(chunks_dropped)),
                ('pd.drain.inflight', toString(inflight)), ('pd.drain.failed_sends', toString(failed_sends)),
                ('pd.drain.ack_withheld', if(ack_withheld = 1, 'true', 'false')),
                ('pd.decode.engine.id', toString(decode_engine_id))],
            name = 'pd.ack', [('pd.rank', toString(rank)), ('pd.ack.generation', toString(ack_generation)),
                ('pd.ack.accepted', if(ack_accepted = 1, 'true', 'false'))],
            name = 'pd.timeout', [('pd.timeout.missing_ranks', toJSONString(missing_ranks)),
                ('pd.timeout.action', toString(timeout_action))],
            name = 'pd.release', [('pd.release.reason', toString(release_reason)), ('pd.kv.pages', toJSONString(pages))],
            name = 'pd.checksum', [('pd.checksum.outcome', toString(checksum_outcome))],
            name = 'pd.cancel', [('pd.cancel.targets', toJSONString(cancel_targets))],
            [])), 'Map(String, String)') AS SpanAttributes,
    toUInt64(toUnixTimestamp64Nano(end_time) - toUnixTimestamp64Nano(start_time)) AS Duration,
    'Unset' AS StatusCode,
    '' AS StatusMessage,
    [] AS `Events.Timestamp`,
    [] AS `Events.Name`,
    [] AS `Events.Attributes`,
    [] AS `Links.TraceId`,
    [] AS `Links.SpanId`,
    [] AS `Links.TraceState`,
    [] AS `Links.Attributes`
FROM {db:Identifier}.spans
-- A site would have stored every span; a caller may fill only what its questions read (the bench: the hours before its window).
WHERE start_time >= {since:DateTime64(9, 'UTC')}
