-- name: flags_lifecycle
-- purpose: Per-lifecycle safety flags (late_write, unsafe_release, ack_after_failed_send, stale_ack_consumed, admission_leak, checksum_mismatch, open_hold) of lifecycles active in a time range (and of holds still open that started up to a day before it), from the stored records (migration 0003): the most recent of each kind and cluster, one row per flag, each carrying how many there are in all.
-- param from DateTime64(9, 'UTC'): start of the range (lifecycles whose spans end at or after it)
-- param to DateTime64(9, 'UTC'): end of the range (lifecycles whose spans start at or before it)
-- param cluster String = '': one cluster, or all when empty
-- param open_hold_grace_ms UInt32 = 5000: how long past its timeout a hold may stay open before it is flagged
-- param limit_per_kind UInt32 = 50: flags returned per kind and cluster, most recent first (kind_total counts them all)
-- columns: kind, kind_total, cluster, request_id, generation, decode_engine, backend, hold_start, hold_timeout_ms, release_at, release_reason, resolution, late_writes, chunks_failed, chunks_timeout, in_flight_at_release, acks_after_failed_send, stale_acks_accepted, admission_outcome, admission_reason, chunks_launched, handoff_at, checksum_outcome, open_ms
SELECT
    kind,
    count() OVER (PARTITION BY kind, cluster) AS kind_total,
    cluster,
    request_id,
    generation,
    decode_engine,
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
    open_ms
FROM
(
    SELECT *, if(hold_start IS NULL, 0, dateDiff('millisecond', assumeNotNull(hold_start), now64(9))) AS open_ms
    FROM {db:Identifier}.lifecycle_records FINAL
    -- Active in the range, or holding pages open since up to a day before it (a stuck hold sends no spans).
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND first_seen <= {to:DateTime64(9, 'UTC')}
      AND (last_seen >= {from:DateTime64(9, 'UTC')}
           OR (resolution = 'open' AND bucket >= toStartOfHour({from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY)))
      AND ({cluster:String} = '' OR cluster = {cluster:String})
      -- Any flag at all: read the other columns only for these.
      AND (late_writes > 0 OR unsafe_release OR acks_after_failed_send > 0 OR stale_acks_accepted > 0
           OR (admission_outcome = 'rejected' AND (chunks_launched > 0 OR handoff_at IS NOT NULL))
           OR checksum_outcome = 'mismatch' OR resolution = 'open')
) AS lc
ARRAY JOIN arrayFilter(k -> k != '', [
    if(late_writes > 0, 'late_write', ''),
    if(unsafe_release, 'unsafe_release', ''),
    if(acks_after_failed_send > 0, 'ack_after_failed_send', ''),
    if(stale_acks_accepted > 0, 'stale_ack_consumed', ''),
    if(admission_outcome = 'rejected' AND (chunks_launched > 0 OR handoff_at IS NOT NULL), 'admission_leak', ''),
    if(checksum_outcome = 'mismatch', 'checksum_mismatch', ''),
    if(resolution = 'open' AND open_ms > hold_timeout_ms + {open_hold_grace_ms:UInt32}, 'open_hold', '')
]) AS kind
ORDER BY kind, cluster, last_seen DESC, request_id, generation
LIMIT {limit_per_kind:UInt32} BY kind, cluster
