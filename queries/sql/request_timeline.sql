-- name: request_timeline
-- purpose: A request's full timeline across engines and generations: every span, oldest first, with the fields that matter for its kind.
-- param request_id String: the request id
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, generation, name, engine_id, engine_role, start_time, end_time, duration_ms, rank, chunk_index, pages, transfer_status, expected_ranks, missing_ranks, ack_generation, ack_accepted, failed_sends, ack_withheld, release_reason, timeout_action, admission_outcome, checksum_outcome
SELECT
    cluster, generation, name, engine_id, engine_role, start_time, end_time,
    (toUnixTimestamp64Nano(end_time) - toUnixTimestamp64Nano(start_time)) / 1e6 AS duration_ms,
    rank, chunk_index, pages, transfer_status, expected_ranks, missing_ranks, ack_generation, ack_accepted,
    failed_sends, ack_withheld, release_reason, timeout_action, admission_outcome, checksum_outcome
FROM {db:Identifier}.spans FINAL
WHERE request_id = {request_id:String}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY start_time, end_time, generation, name
