-- name: incidents
-- purpose: The per-lifecycle safety violations (late_write, unsafe_release, ack_after_failed_send, stale_ack_consumed, admission_leak, checksum_mismatch) of lifecycles active in a time range, grouped into incidents: one per cluster, kind and culprit (the decode engine and version, the prefill engines and versions and the backend the lifecycles share), with how many, first and last seen, a count per bucket for a sparkline and the most recent requests. The on-call page lists these first, and the violation alerts are these incidents.
-- param from DateTime64(9, 'UTC'): start of the range (lifecycles whose spans end at or after it)
-- param to DateTime64(9, 'UTC'): end of the range (lifecycles whose spans start at or before it)
-- param cluster String = '': one cluster, or all when empty
-- param bucket_seconds UInt32 = 60: width of the sparkline's buckets, counted from `from`
-- param examples UInt32 = 5: most recent requests listed per incident
-- param max_incidents UInt32 = 200: incidents returned, most recently seen first (total_incidents counts them all)
-- param max_lifecycle_hours UInt32 = 0: when not 0, only lifecycles that began up to this long before `from` (a bound on the read for frequent lookups; 0: any, as flags_lifecycle)
-- columns: cluster, kind, decode_engine, decode_version, prefill_engine, prefill_version, backend, violations, first_seen, last_seen, last_computed_at (newest record version among them: it moves whenever one of them is stored again), examples ([request id, generation], newest first), spark_buckets, spark_counts (violations per bucket index, by last_seen), total_incidents
SELECT
    cluster,
    kind,
    decode_engine,
    decode_version,
    prefill_engine,
    prefill_version,
    backend,
    count() AS violations,
    min(seen_at) AS first_seen,
    max(seen_at) AS last_seen,
    max(computed_at) AS last_computed_at,
    -- A bounded sorted array per incident, newest first, rather than every request of a storm.
    arrayMap(e -> (e.2, e.3), arraySlice(groupArraySorted(greatest(1, {examples:UInt32}))((-toUnixTimestamp64Nano(seen_at), request_id, generation)), 1, {examples:UInt32})) AS examples,
    -- As many entries as buckets with violations, whatever their number.
    sumMap([toUInt32(intDiv(greatest(0, toUnixTimestamp64Milli(seen_at) - toUnixTimestamp64Milli({from:DateTime64(9, 'UTC')})), 1000 * greatest(1, {bucket_seconds:UInt32})))], [toUInt64(1)]) AS spark,
    spark.1 AS spark_buckets,
    spark.2 AS spark_counts,
    count() OVER () AS total_incidents
FROM
(
    -- The kinds a lifecycle keeps once raised (migration 0004), from the flagged records alone.
    -- (seen_at: the lifecycle's last span, named apart from the incident's last_seen.)
    SELECT cluster, request_id, generation, last_seen AS seen_at, computed_at, decode_engine, decode_version, backend,
        arrayStringConcat(arraySort(arrayDistinct(arrayFilter(e -> e != '', arrayMap(p -> p.1, prefill_engines)))), ',') AS prefill_engine,
        arrayStringConcat(arraySort(arrayDistinct(arrayFilter(v -> v != '', arrayMap(p -> p.2, prefill_engines)))), ',') AS prefill_version,
        arrayFilter(k -> k != '', [
            if(late_writes > 0, 'late_write', ''),
            if(unsafe_release, 'unsafe_release', ''),
            if(acks_after_failed_send > 0, 'ack_after_failed_send', ''),
            if(stale_acks_accepted > 0, 'stale_ack_consumed', ''),
            if(admission_outcome = 'rejected' AND (chunks_launched > 0 OR handoff_at IS NOT NULL), 'admission_leak', ''),
            if(checksum_outcome = 'mismatch', 'checksum_mismatch', '')]) AS kinds
    FROM {db:Identifier}.lifecycle_flags FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND ({max_lifecycle_hours:UInt32} = 0
        OR bucket >= toStartOfFiveMinutes({from:DateTime64(9, 'UTC')} - toIntervalHour({max_lifecycle_hours:UInt32})))
      AND first_seen <= {to:DateTime64(9, 'UTC')}
      AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS flagged
ARRAY JOIN kinds AS kind
GROUP BY cluster, kind, decode_engine, decode_version, prefill_engine, prefill_version, backend
ORDER BY last_seen DESC, cluster, kind, decode_engine, prefill_engine, backend
LIMIT {max_incidents:UInt32}
