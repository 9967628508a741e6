-- Computes again, whole, the hold minutes (migration 0010) of the given (cluster, minute) pairs from the held records
-- (migration 0006): run by the pipeline after each record refresh, for the minutes in which the refreshed
-- lifecycles' holds started (pipeline/sql/touched_hold_minutes.sql), and by a rebuild for every minute with a hold.
-- A pair with no hold left (its hold moved to an earlier minute when an earlier hold span arrived) gets an empty row.
-- first_minute and last_minute bound the pairs' minutes, so that the read skips the rest of the table.
-- On a cluster a minute's holds are on every shard: read through the Distributed held records (FINAL per shard is
-- whole, a record's versions share its shard), grouped across them, and the minute's row sent to one shard.
INSERT INTO {db:Identifier}.hold_minutes
SELECT
    pair.1 AS cluster,
    pair.2 AS minute,
    now64(9) AS computed_at,
    folded.resolution_groups,
    folded.tails
FROM (SELECT arrayJoin({minutes:Array(Tuple(String, DateTime('UTC')))}) AS pair) AS wanted
LEFT JOIN
(
    SELECT
        cluster,
        minute,
        groupArray((resolution, decode_engine, backend, decode_version, prefill_versions, holds)) AS resolution_groups,
        arrayFlatten(groupArray(group_tails)) AS tails
    FROM
    (
        -- Holds alike in every dimension of the resolution groups, counted: the minute's row lists each such group
        -- once (the tails stay one per hold and prefill engine).
        SELECT
            cluster,
            toStartOfMinute(assumeNotNull(hold_start)) AS minute,
            resolution,
            decode_engine,
            backend,
            decode_version,
            -- Each distinct prefill version a hold had: hold_resolution_groups counts a hold once per version pair (a
            -- hold whose prefill engine never reported, with no transfer or drain span, has none to judge).
            arrayFilter(v -> v != '', arrayDistinct(arrayMap(p -> p.2, prefill_engines))) AS prefill_versions,
            count() AS holds,
            groupArrayArray(if(transfer_tail_ms IS NULL, [],
                arrayMap(p -> (p.1, backend, assumeNotNull(transfer_tail_ms), hold_timeout_ms), prefill_engines))) AS group_tails
        FROM {db:Identifier}.lifecycle_holds FINAL
        -- A hold starting in a minute has its record's bucket (five minutes of its first span) at or before it, and
        -- its last span at or after it.
        WHERE bucket < {last_minute:DateTime('UTC')} + INTERVAL 1 MINUTE
          AND last_seen >= {first_minute:DateTime('UTC')}
          AND hold_start >= {first_minute:DateTime('UTC')}
          AND hold_start < {last_minute:DateTime('UTC')} + INTERVAL 1 MINUTE
          AND (cluster, toStartOfMinute(assumeNotNull(hold_start))) IN {minutes:Array(Tuple(String, DateTime('UTC')))}
        GROUP BY cluster, minute, resolution, decode_engine, backend, decode_version, prefill_versions
    )
    GROUP BY cluster, minute
) AS folded ON folded.cluster = pair.1 AND folded.minute = pair.2
SETTINGS join_use_nulls = 0
