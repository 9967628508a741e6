-- name: late_write_victims
-- purpose: Every page a late write landed on, and the generation that owned that page when it landed (an as-of join on decode engine and page over allocations), for the late-writing lifecycles active in a time range.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param request_id String = '': one writing request id, or all when empty
-- param writers_per_cluster UInt32 = 0: only the most recent writing lifecycles of each cluster (by last span), as flags_lifecycle lists them with the same limit; 0 for all
-- columns: cluster, request_id, generation, rank, chunk_index, landed_at, decode_engine, page, victim_request_id, victim_generation (victim_request_id is empty when the page was free)
--
-- A page's owner when a late write landed is the latest allocation of it, on that decode engine, at or before the
-- landing. Pages are owned by one lifecycle at a time, and the writer owned its pages until its release, so only an
-- allocation between the writer's release and the landing can be that owner (a later one's pages were free). Owners
-- are read from the allocations (migration 0009) of the seconds some late write of the engine spans, between the
-- earliest release of these writers and the latest landing: a few thousand records of the 25 k a two-minute stretch
-- allocates at 875 k lifecycles an hour.
WITH
    -- The late-writing lifecycles, computed once (a named subquery would run again at each use):
    -- (cluster, request id, generation, released at, first seen, last seen).
    (
        SELECT groupArray((cluster, request_id, generation, released_at, first_seen, last_seen))
        FROM
        (
            SELECT cluster, request_id, generation, assumeNotNull(release_at) AS released_at, first_seen, last_seen
            FROM {db:Identifier}.lifecycle_flags FINAL
            WHERE bucket <= {to:DateTime64(9, 'UTC')}
              AND last_seen >= {from:DateTime64(9, 'UTC')}
              AND first_seen <= {to:DateTime64(9, 'UTC')}
              AND late_writes > 0
              AND ({cluster:String} = '' OR cluster = {cluster:String})
              AND ({request_id:String} = '' OR request_id = {request_id:String})
            ORDER BY cluster, last_seen DESC, request_id, generation
            LIMIT if({writers_per_cluster:UInt32} = 0, 18446744073709551615, {writers_per_cluster:UInt32}) BY cluster
        ) AS latest
    ) AS writer_list,
    writers AS (SELECT w.1 AS cluster, w.2 AS request_id, w.3 AS generation, w.4 AS released_at FROM (SELECT arrayJoin(writer_list) AS w)),
    -- Every page written late, from the late writes' pages (migration 0008): (cluster, request id, generation, rank,
    -- chunk, landed at, decode engine, page, writer released at, span id). A write lands at or after its span's
    -- start, so the writers' first seen prunes the table's days. A capture repeated is an identical row: distinct
    -- tuples drop it without FINAL.
    (
        SELECT groupUniqArray((p.cluster, p.request_id, p.generation, p.rank, p.chunk_index, p.landed_at, p.decode_engine, page, l.released_at, p.span_id))
        FROM {db:Identifier}.late_write_pages AS p
        ARRAY JOIN p.pages AS page
        INNER JOIN writers AS l ON p.cluster = l.cluster AND p.request_id = l.request_id AND p.generation = l.generation
        WHERE (p.cluster, p.request_id, p.generation) IN (SELECT cluster, request_id, generation FROM writers)
          AND p.landed_at >= arrayMin(arrayMap(w -> w.5, writer_list))
          AND p.landed_at > l.released_at
    ) AS late_pages,
    arrayMin(arrayMap(x -> x.9, late_pages)) AS earliest_release,
    arrayMax(arrayMap(x -> x.6, late_pages)) AS latest_landing
SELECT
    w.cluster AS cluster,
    w.request_id AS request_id,
    w.generation AS generation,
    w.rank AS rank,
    w.chunk_index AS chunk_index,
    w.landed_at AS landed_at,
    w.decode_engine AS decode_engine,
    w.page AS page,
    if(o.owner_request_id = '' OR o.allocated_at < w.released_at OR (o.owner_request_id = w.request_id AND o.owner_generation = w.generation) OR o.owner_released_at <= w.landed_at,
       '', o.owner_request_id) AS victim_request_id,
    if(victim_request_id = '', 0, o.owner_generation) AS victim_generation
FROM
(
    SELECT x.1 AS cluster, x.2 AS request_id, x.3 AS generation, x.4 AS rank, x.5 AS chunk_index, x.6 AS landed_at, x.7 AS decode_engine, x.8 AS page,
        x.9 AS released_at
    FROM (SELECT arrayJoin(late_pages) AS x)
) AS w
ASOF LEFT JOIN
(
    SELECT
        cluster,
        decode_engine,
        page,
        allocated_at,
        request_id AS owner_request_id,
        generation AS owner_generation,
        coalesce(release_at, toDateTime64('2262-01-01 00:00:00', 9, 'UTC')) AS owner_released_at
    FROM {db:Identifier}.page_allocations FINAL
    ARRAY JOIN kv_pages AS page
    WHERE notEmpty(late_pages)
      AND allocated_at >= earliest_release
      AND allocated_at <= latest_landing
      -- Only the allocations of an (engine, second) from some late write's release to its landing, as one number per
      -- allocation (a hash collision only lets more through: the join matches cluster and engine), and of those only
      -- the pages written late (on any engine): the join's right side stays small.
      AND bitShiftLeft(cityHash64(cluster, decode_engine) % 4294967296, 32) + toUInt32(toUnixTimestamp(allocated_at)) IN
          (SELECT bitShiftLeft(cityHash64(c, e) % 4294967296, 32) + arrayJoin(range(toUInt32(toUnixTimestamp(released)), toUInt32(toUnixTimestamp(landed)) + 1))
           FROM (SELECT DISTINCT x.1 AS c, x.7 AS e, x.9 AS released, x.6 AS landed FROM (SELECT arrayJoin(late_pages) AS x)))
      AND page IN (SELECT x.8 FROM (SELECT arrayJoin(late_pages) AS x))
) AS o ON w.cluster = o.cluster AND w.decode_engine = o.decode_engine AND w.page = o.page AND w.landed_at >= o.allocated_at
ORDER BY cluster, request_id, generation, landed_at, rank, chunk_index, page
