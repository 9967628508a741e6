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

CREATE VIEW IF NOT EXISTS {{db}}.lifecycles{{local}} {{on_cluster}} AS
SELECT
    cluster, request_id, generation, first_seen, last_seen, decode_engine, decode_version, backend, capacity_slots,
    arraySort(prefill_engines) AS prefill_engines,
    admission.3 AS admission_outcome,
    admission.4 AS admission_reason,
    if(has_alloc, alloc.1, NULL) AS allocated_at,
    alloc.3 AS kv_slots,
    alloc.4 AS kv_pages,
    length(transfers) AS chunks_launched,
    length(ok_ends) AS chunks_ok,
    arrayCount(t -> t.4 = 'failed', transfers) AS chunks_failed,
    arrayCount(t -> t.4 = 'timeout', transfers) AS chunks_timeout,
    if(empty(ok_ends), NULL, arrayMax(ok_ends)) AS last_write_at,
    if(handoff_min >= toDateTime64('2261-12-31 00:00:00', 9, 'UTC'), NULL, handoff_min) AS handoff_at,
    if(cancelled_min >= toDateTime64('2261-12-31 00:00:00', 9, 'UTC'), NULL, cancelled_min) AS cancelled_at,
    if(has_hold, hold.1, NULL) AS hold_start,
    hold.3 AS expected_ranks,
    hold.4 AS hold_timeout_ms,
    hold.5 AS held_slots,
    arraySort(arrayDistinct(arrayMap(a -> a.3, arrayFilter(a -> a.5 = 1, acks)))) AS acked_ranks,
    arrayCount(a -> a.4 != generation AND a.5 = 1, acks) AS stale_acks_accepted,
    arrayCount(a -> a.4 != generation AND a.5 = 0, acks) AS stale_acks_rejected,
    length(drains) AS drain_count,
    arrayCount(d -> d.3 > 0, drains) AS drains_with_failed_sends,
    arrayCount(d -> d.3 > 0 AND d.4 = 1, drains) AS acks_withheld,
    arrayCount(d -> d.3 > 0 AND d.4 = 0, drains) AS acks_after_failed_send,
    if(has_timeout, timeout.1, NULL) AS timeout_at,
    timeout.3 AS missing_ranks,
    timeout.4 AS timeout_action,
    if(has_release, release.1, NULL) AS release_at,
    release.3 AS release_reason,
    multiIf(arrayExists(c -> c.3 = 'mismatch', checksums), 'mismatch', empty(checksums), '', 'ok') AS checksum_outcome,
    multiIf(NOT has_hold, 'none', NOT has_release, 'open', release.3 = 'drained', 'drained', 'timeout') AS resolution,
    if(has_hold AND has_release, (toUnixTimestamp64Nano(release.1) - toUnixTimestamp64Nano(hold.1)) / 1e6, NULL) AS hold_ms,
    if(has_hold AND NOT empty(ok_ends), (toUnixTimestamp64Nano(arrayMax(ok_ends)) - toUnixTimestamp64Nano(hold.1)) / 1e6, NULL) AS transfer_tail_ms,
    if(has_release, arrayCount(t -> t.4 = 'ok' AND t.3 > release.1, transfers), 0) AS late_writes,
    if(has_release, arrayCount(t -> t.2 <= release.1 AND t.3 > release.1, transfers), 0) AS in_flight_at_release,
    toBool(has_release AND release.3 = 'timeout' AND arrayExists(t -> t.2 <= release.1 AND (t.3 > release.1 OR t.4 != 'ok'), transfers)) AS unsafe_release
FROM
(
    -- Each set's earliest element once, so the outer expressions reuse it rather than sort again (this layer
    -- also keeps the view's planning cheap: a request's record is read on every page view).
    SELECT *,
        NOT empty(admissions_all) AS has_admission, arraySort(admissions_all)[1] AS admission,
        NOT empty(allocs_all) AS has_alloc, arraySort(allocs_all)[1] AS alloc,
        NOT empty(holds_all) AS has_hold, arraySort(holds_all)[1] AS hold,
        NOT empty(timeouts_all) AS has_timeout, arraySort(timeouts_all)[1] AS timeout,
        NOT empty(releases_all) AS has_release, arraySort(releases_all)[1] AS release,
        arrayMap(t -> t.3, arrayFilter(t -> t.4 = 'ok', transfers)) AS ok_ends
    FROM
    (
        SELECT
            cluster, request_id, generation,
            min(first_seen) AS first_seen, max(last_seen) AS last_seen,
            max(decode_engine) AS decode_engine, max(decode_version) AS decode_version, max(backend) AS backend,
            max(capacity_slots) AS capacity_slots,
            groupUniqArrayArray(prefill_engines) AS prefill_engines,
            groupUniqArrayArray(admissions) AS admissions_all,
            groupUniqArrayArray(allocs) AS allocs_all,
            groupUniqArrayArray(transfers) AS transfers,
            min(handoff_at) AS handoff_min,
            groupUniqArrayArray(holds) AS holds_all,
            groupUniqArrayArray(drains) AS drains,
            groupUniqArrayArray(acks) AS acks,
            groupUniqArrayArray(timeouts) AS timeouts_all,
            groupUniqArrayArray(releases) AS releases_all,
            groupUniqArrayArray(checksums) AS checksums,
            min(cancelled_at) AS cancelled_min
        FROM {{db}}.lifecycle_states{{local}}
        GROUP BY cluster, request_id, generation
    ) AS merged
) AS firsts;

-- On a cluster the view runs on each node over its own states (all of a lifecycle's spans are on one shard), and a
-- Distributed table of the plain name fronts it: a read filtered by lifecycle key is sent to every shard and each
-- reaches its states' primary key. A view over the Distributed states instead does not send the filter on with
-- ClickHouse's analyzer, and every shard returned all its states.
-- @cluster-only
CREATE TABLE IF NOT EXISTS {{db}}.lifecycles {{on_cluster}} AS {{db}}.lifecycles{{local}}
ENGINE = Distributed({{cluster_name}}, {{db}}, lifecycles{{local}}, cityHash64(cluster, request_id));
