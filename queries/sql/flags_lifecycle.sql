-- name: flags_lifecycle
-- purpose: Per-lifecycle safety flags (late_write, unsafe_release, ack_after_failed_send, stale_ack_consumed, admission_leak, checksum_mismatch, open_hold) of lifecycles active in a time range (and of holds still open that started up to open_lookback_hours before it), from the stored records of flagged lifecycles and, for open holds, of held ones: the most recent of each kind and cluster, one row per flag, each carrying how many there are in all.
-- param from DateTime64(9, 'UTC'): start of the range (lifecycles whose spans end at or after it)
-- param to DateTime64(9, 'UTC'): end of the range (lifecycles whose spans start at or before it)
-- param cluster String = '': one cluster, or all when empty
-- param open_hold_grace_ms UInt32 = 5000: how long past its timeout a hold may stay open before it is flagged
-- param open_lookback_hours UInt32 = 1: holds still open are listed when they started up to this long before the range (a stuck hold sends no spans; the open-holds gauges look further back)
-- param limit_per_kind UInt32 = 50: flags returned per kind and cluster, most recent first (kind_total counts them all)
-- columns: kind, kind_total, cluster, request_id, generation, decode_engine, decode_version, prefill_engine, prefill_version (the prefill engines that sent and their versions, comma-separated, as incidents.sql names an incident's culprit), backend, hold_start, hold_timeout_ms, release_at, release_reason, resolution, late_writes, chunks_failed, chunks_timeout, in_flight_at_release, acks_after_failed_send, stale_acks_accepted, admission_outcome, admission_reason, chunks_launched, handoff_at, checksum_outcome, open_ms
WITH
    -- The flags listed, found from the few columns that decide them, as one value computed once:
    -- (kind, how many of that kind and cluster, cluster, request id, generation, bucket).
    (
        SELECT groupArray((kind, kind_total, cluster, latest.2, latest.3, latest.4))
        FROM
        (
            -- Per kind and cluster, how many and the most recent: a bounded sorted array per group (last_seen
            -- descending, then request id and generation, as the final ORDER BY) rather than sorting every flag of the
            -- window and cutting with LIMIT BY (a sixth less time at 760 k lifecycles an hour). greatest(1, ...): the
            -- function takes no size 0, and the slice makes 0 list nothing.
            SELECT
                transform(kind_bit, [1, 2, 4, 8, 16, 32, 64],
                    ['open_hold', 'late_write', 'unsafe_release', 'ack_after_failed_send', 'stale_ack_consumed', 'admission_leak', 'checksum_mismatch'], '') AS kind,
                cluster,
                count() AS kind_total,
                arraySlice(groupArraySorted(greatest(1, {limit_per_kind:UInt32}))((-toUnixTimestamp64Nano(last_seen), request_id, generation, bucket)),
                    1, {limit_per_kind:UInt32}) AS latest_of_kind
            FROM
            (
                -- The kinds a lifecycle keeps once raised, from the flagged records alone (migration 0004).
                SELECT cluster, request_id, generation, last_seen, bucket, late_writes, unsafe_release, acks_after_failed_send,
                    stale_acks_accepted, admission_outcome, chunks_launched, handoff_at, checksum_outcome, false AS open_hold
                FROM {db:Identifier}.lifecycle_flags FINAL
                WHERE bucket <= {to:DateTime64(9, 'UTC')}
                  AND first_seen <= {to:DateTime64(9, 'UTC')}
                  AND last_seen >= {from:DateTime64(9, 'UTC')}
                  AND ({cluster:String} = '' OR cluster = {cluster:String})
                UNION ALL
                -- Holds open past their timeout and the grace, from the held records (it depends on the clock): two
                -- disjoint reads rather than one OR, so each prunes by its own bounds. Those active in the range
                -- (the min-max index on last_seen), whose other kinds the first read has...
                SELECT cluster, request_id, generation, last_seen, bucket, 0, false, 0, 0, '', 0, NULL, '', true AS open_hold
                FROM {db:Identifier}.lifecycle_holds FINAL
                WHERE bucket <= {to:DateTime64(9, 'UTC')}
                  AND first_seen <= {to:DateTime64(9, 'UTC')}
                  AND last_seen >= {from:DateTime64(9, 'UTC')}
                  AND resolution = 'open' AND dateDiff('millisecond', assumeNotNull(hold_start), now64(9)) > hold_timeout_ms + {open_hold_grace_ms:UInt32}
                  AND ({cluster:String} = '' OR cluster = {cluster:String})
                UNION ALL
                -- ...and those whose spans all came before it (the few hours of the lookback, and the set index on
                -- resolution): a stuck hold sends no spans, and is live now, so all of its kinds are listed.
                SELECT cluster, request_id, generation, last_seen, bucket, late_writes, unsafe_release, acks_after_failed_send,
                    stale_acks_accepted, admission_outcome, chunks_launched, handoff_at, checksum_outcome, true AS open_hold
                FROM {db:Identifier}.lifecycle_holds FINAL
                WHERE bucket <= {to:DateTime64(9, 'UTC')}
                  AND bucket >= toStartOfFiveMinutes({from:DateTime64(9, 'UTC')} - toIntervalHour({open_lookback_hours:UInt32}))
                  AND last_seen < {from:DateTime64(9, 'UTC')}
                  AND resolution = 'open' AND dateDiff('millisecond', assumeNotNull(hold_start), now64(9)) > hold_timeout_ms + {open_hold_grace_ms:UInt32}
                  AND ({cluster:String} = '' OR cluster = {cluster:String})
            ) AS candidates
            -- One row per kind a lifecycle has, as a bit (named once per group above, not once per row).
            ARRAY JOIN bitmaskToArray(
                toUInt8(open_hold)
                + 2 * (late_writes > 0)
                + 4 * unsafe_release
                + 8 * (acks_after_failed_send > 0)
                + 16 * (stale_acks_accepted > 0)
                + 32 * (admission_outcome = 'rejected' AND (chunks_launched > 0 OR handoff_at IS NOT NULL))
                + 64 * (checksum_outcome = 'mismatch')) AS kind_bit
            GROUP BY kind_bit, cluster
        ) AS flagged
        ARRAY JOIN latest_of_kind AS latest
    ) AS listed,
    -- Open holds are looked up in the held records, every other kind in the flagged ones (below).
    arrayFilter(f -> f.1 = 'open_hold', listed) AS listed_open,
    arrayFilter(f -> f.1 != 'open_hold', listed) AS listed_kept
SELECT
    flag.1 AS kind,
    flag.2 AS kind_total,
    cluster,
    request_id,
    generation,
    decode_engine,
    decode_version,
    -- Word for word incidents.sql's culprit, so a flag's incident id (queries/incidents.ts) is its incident's.
    arrayStringConcat(arraySort(arrayDistinct(arrayFilter(e -> e != '', arrayMap(p -> p.1, prefill_engines)))), ',') AS prefill_engine,
    arrayStringConcat(arraySort(arrayDistinct(arrayFilter(v -> v != '', arrayMap(p -> p.2, prefill_engines)))), ',') AS prefill_version,
    backend,
    hold_start,
    hold_timeout_ms,
    release_at,
    release_reason,
    resolution,
    late_writes,
    chunks_failed,
    chunks_timeout,
    in_flight_at_release,
    acks_after_failed_send,
    stale_acks_accepted,
    admission_outcome,
    admission_reason,
    chunks_launched,
    handoff_at,
    checksum_outcome,
    if(hold_start IS NULL, 0, dateDiff('millisecond', assumeNotNull(hold_start), now64(9))) AS open_ms
-- Then the whole records of the lifecycles listed, and one row per flag of each: an open hold's from the held
-- records, any other kind's from the flagged ones. Both keep every version of such a lifecycle from its first hold
-- span or flag on, so each holds its newest record, and each is a small part of every record of the window.
FROM
(
    SELECT *, arrayFilter(f -> f.3 = cluster AND f.4 = request_id AND f.5 = generation, listed_kept) AS flags_of
    FROM {db:Identifier}.lifecycle_flags FINAL
    WHERE notEmpty(listed_kept) AND (bucket, cluster, request_id, generation) IN (SELECT f.6, f.3, f.4, f.5 FROM (SELECT arrayJoin(listed_kept) AS f))
    UNION ALL
    SELECT *, arrayFilter(f -> f.3 = cluster AND f.4 = request_id AND f.5 = generation, listed_open) AS flags_of
    FROM {db:Identifier}.lifecycle_holds FINAL
    WHERE notEmpty(listed_open) AND (bucket, cluster, request_id, generation) IN (SELECT f.6, f.3, f.4, f.5 FROM (SELECT arrayJoin(listed_open) AS f))
) AS listed_records
ARRAY JOIN flags_of AS flag
ORDER BY kind, cluster, last_seen DESC, request_id, generation
