-- Migration 0002: `lifecycles`, one record per (cluster, request id, generation), merged from the
-- idempotent states at read time, so it is always queryable, also while a lifecycle is still open, and a
-- span arriving hours late lands in the right record.
--
-- Derived fields:
--   resolution        'none' (no hold), 'open' (hold, no release yet), 'drained' (released on the complete
--                     ack set), 'timeout' (released any other way: on the hold timer, or forced)
--   hold_ms           release - hold start (ABORT)
--   transfer_tail_ms  last successful write completion - hold start (negative: the last write finished
--                     before ABORT)
--   late_writes       successful writes of this generation that completed after its release
--   in_flight_at_release  writes posted before the release that completed (in any status) after it
--   unsafe_release    released by timeout while a write lacked completion evidence (in flight at release,
--                     failed or timed out)

CREATE VIEW IF NOT EXISTS {{db}}.lifecycles {{on_cluster}} AS
SELECT
    cluster,
    request_id,
    generation,
    first_seen,
    last_seen,
    decode_engine,
    decode_version,
    backend,
    capacity_slots,
    arraySort(prefill_engines) AS prefill_engines,
    if(empty(admissions), '', arraySort(admissions)[1].3) AS admission_outcome,
    if(empty(admissions), '', arraySort(admissions)[1].4) AS admission_reason,
    if(empty(allocs), NULL, arraySort(allocs)[1].1) AS allocated_at,
    if(empty(allocs), 0, arraySort(allocs)[1].3) AS kv_slots,
    if(empty(allocs), [], arraySort(allocs)[1].4) AS kv_pages,
    length(transfers) AS chunks_launched,
    arrayCount(t -> t.4 = 'ok', transfers) AS chunks_ok,
    arrayCount(t -> t.4 = 'failed', transfers) AS chunks_failed,
    arrayCount(t -> t.4 = 'timeout', transfers) AS chunks_timeout,
    if(chunks_ok = 0, NULL, arrayMax(arrayMap(t -> t.3, arrayFilter(t -> t.4 = 'ok', transfers)))) AS last_write_at,
    if(handoff_min >= toDateTime64('2261-12-31 00:00:00', 9, 'UTC'), NULL, handoff_min) AS handoff_at,
    if(cancelled_min >= toDateTime64('2261-12-31 00:00:00', 9, 'UTC'), NULL, cancelled_min) AS cancelled_at,
    if(empty(holds), NULL, arraySort(holds)[1].1) AS hold_start,
    if(empty(holds), [], arraySort(holds)[1].3) AS expected_ranks,
    if(empty(holds), 0, arraySort(holds)[1].4) AS hold_timeout_ms,
    if(empty(holds), 0, arraySort(holds)[1].5) AS held_slots,
    arraySort(arrayDistinct(arrayMap(a -> a.3, arrayFilter(a -> a.5 = 1, acks)))) AS acked_ranks,
    arrayCount(a -> a.4 != generation AND a.5 = 1, acks) AS stale_acks_accepted,
    arrayCount(a -> a.4 != generation AND a.5 = 0, acks) AS stale_acks_rejected,
    length(drains) AS drain_count,
    arrayCount(d -> d.3 > 0, drains) AS drains_with_failed_sends,
    arrayCount(d -> d.3 > 0 AND d.4 = 1, drains) AS acks_withheld,
    arrayCount(d -> d.3 > 0 AND d.4 = 0, drains) AS acks_after_failed_send,
    if(empty(timeouts), NULL, arraySort(timeouts)[1].1) AS timeout_at,
    if(empty(timeouts), [], arraySort(timeouts)[1].3) AS missing_ranks,
    if(empty(timeouts), '', arraySort(timeouts)[1].4) AS timeout_action,
    if(empty(releases), NULL, arraySort(releases)[1].1) AS release_at,
    if(empty(releases), '', arraySort(releases)[1].3) AS release_reason,
    multiIf(arrayExists(c -> c.3 = 'mismatch', checksums), 'mismatch', empty(checksums), '', 'ok') AS checksum_outcome,
    multiIf(empty(holds), 'none', empty(releases), 'open', release_reason = 'drained', 'drained', 'timeout') AS resolution,
    if(hold_start IS NULL OR release_at IS NULL, NULL,
       (toUnixTimestamp64Nano(assumeNotNull(release_at)) - toUnixTimestamp64Nano(assumeNotNull(hold_start))) / 1e6) AS hold_ms,
    if(hold_start IS NULL OR last_write_at IS NULL, NULL,
       (toUnixTimestamp64Nano(assumeNotNull(last_write_at)) - toUnixTimestamp64Nano(assumeNotNull(hold_start))) / 1e6) AS transfer_tail_ms,
    if(release_at IS NULL, 0, arrayCount(t -> t.4 = 'ok' AND t.3 > assumeNotNull(release_at), transfers)) AS late_writes,
    if(release_at IS NULL, 0, arrayCount(t -> t.2 <= assumeNotNull(release_at) AND t.3 > assumeNotNull(release_at), transfers)) AS in_flight_at_release,
    toBool(release_reason = 'timeout'
        AND arrayExists(t -> t.2 <= assumeNotNull(release_at) AND (t.3 > assumeNotNull(release_at) OR t.4 != 'ok'), transfers)) AS unsafe_release
FROM
(
    SELECT
        cluster,
        request_id,
        generation,
        min(first_seen) AS first_seen,
        max(last_seen) AS last_seen,
        max(decode_engine) AS decode_engine,
        max(decode_version) AS decode_version,
        max(backend) AS backend,
        max(capacity_slots) AS capacity_slots,
        groupUniqArrayArray(prefill_engines) AS prefill_engines,
        groupUniqArrayArray(admissions) AS admissions,
        groupUniqArrayArray(allocs) AS allocs,
        groupUniqArrayArray(transfers) AS transfers,
        min(handoff_at) AS handoff_min,
        groupUniqArrayArray(holds) AS holds,
        groupUniqArrayArray(drains) AS drains,
        groupUniqArrayArray(acks) AS acks,
        groupUniqArrayArray(timeouts) AS timeouts,
        groupUniqArrayArray(releases) AS releases,
        groupUniqArrayArray(checksums) AS checksums,
        min(cancelled_at) AS cancelled_min
    FROM {{db}}.lifecycle_states
    GROUP BY cluster, request_id, generation
) AS merged;
