-- name: advice_tails
-- purpose: Per pairing (prefill version, decode version, backend) and decode engine: the holds of a window, a bounded uniform sample of the time from ABORT to the last write's completion, the hold timeout in use, and a sample of hold durations and sizes for the cost, for the hold-timeout advice (queries/advice.ts).
-- param from DateTime64(9, 'UTC'): holds starting at or after this time
-- param to DateTime64(9, 'UTC'): holds starting before this time
-- param cluster String = '': one cluster, or all when empty
-- param sample_size UInt32 = 50000: the most tails kept per group, a uniform sample of them (reservoir): 50,000 is above the 36,887 holds the empirical quantile needs at the default target of 1 in 10,000 (minimumEmpiricalSamples), and bounds the read at about 0.3 MB a group however many holds it has
-- param holds_sample_size UInt32 = 5000: the most holds kept per group for the cost (a mean over them: slot-seconds per abort), a uniform sample: 5,000 puts the mean within about 3 % of the whole group's for hold lengths as spread as an hour's (two standard errors at a coefficient of variation of 1), where 50,000 tuples cost more to read and decode than the rest of the advice
-- param seed UInt64 = 1: the samples' seed, so the same window gives the same advice
-- columns: cluster, prefill_version, decode_version, backend, decode_engine, holds, open, drained, timeouts, without_evidence (resolved holds with a failed or timed-out write: no completion time), unsafe_releases, with_evidence, timeout_common_ms (the most common hold timeout), timeout_max_ms, capacity_slots, today_slot_seconds (held slots × hold duration per resolved hold, its mean), tails_ms (sample: ms from ABORT to the last write's completion, 0 when it completed before ABORT), holds_sample (sample of (release ms after ABORT, -1 when open; held slots; 1 when drained))
--
-- The tail of a hold is known only when every write it launched has completion evidence: a failed or timed-out call
-- is none (a timed-out Mooncake call may keep retrying underneath), so such holds carry no tail and are counted in
-- without_evidence instead; they are the releases the unsafe_release flag reports, and no timeout makes them safe.
-- Open holds are left out of the tails too (their writes may still complete: the tail is censored) and counted in
-- open. A write still in flight when its span was last read is not in the record at all: the record is computed
-- again when its span arrives. A last write that completed before ABORT counts as 0, since no timeout can release
-- before it; a hold with no writes at all likewise.
SELECT
    cluster,
    prefill_version,
    decode_version,
    backend,
    decode_engine,
    count() AS holds,
    countIf(resolution = 'open') AS open,
    countIf(resolution = 'drained') AS drained,
    countIf(resolution = 'timeout') AS timeouts,
    countIf(resolution != 'open' AND NOT evidence) AS without_evidence,
    countIf(unsafe_release) AS unsafe_releases,
    countIf(evidence) AS with_evidence,
    topK(1)(hold_timeout_ms)[1] AS timeout_common_ms,
    max(hold_timeout_ms) AS timeout_max_ms,
    max(capacity_slots) AS capacity_slots,
    avgIf(held_slots * hold_ms / 1000, resolution != 'open') AS today_slot_seconds,
    groupArraySampleIf({sample_size:UInt32}, {seed:UInt64})(tail, evidence) AS tails_ms,
    groupArraySample({holds_sample_size:UInt32}, {seed:UInt64} + 1)((coalesce(hold_ms, -1), toUInt64(held_slots), toUInt8(resolution = 'drained'))) AS holds_sample
FROM
(
    SELECT cluster, pv AS prefill_version, decode_version, backend, decode_engine, resolution, unsafe_release, hold_timeout_ms,
        capacity_slots, held_slots, hold_ms,
        resolution != 'open' AND chunks_failed = 0 AND chunks_timeout = 0 AS evidence,
        greatest(0, coalesce(transfer_tail_ms, 0)) AS tail
    FROM {db:Identifier}.lifecycle_holds FINAL
    -- One row per prefill version the hold's writes came from; '' when no prefill span reached the record.
    ARRAY JOIN if(empty(prefill_engines), [''], arrayDistinct(arrayMap(p -> p.2, prefill_engines))) AS pv
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND hold_start IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')}
      AND hold_start < {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS h
GROUP BY cluster, prefill_version, decode_version, backend, decode_engine
ORDER BY cluster, prefill_version, decode_version, backend, decode_engine
