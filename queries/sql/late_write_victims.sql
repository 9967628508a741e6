-- name: late_write_victims
-- purpose: Every page a late write landed on, and the generation that owned that page when it landed (an as-of join on decode engine and page over allocations), for the late-writing lifecycles active in a time range.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- param request_id String = '': one writing request id, or all when empty
-- columns: cluster, request_id, generation, rank, chunk_index, landed_at, decode_engine, page, victim_request_id, victim_generation (victim_request_id is empty when the page was free)
SELECT
    w.cluster AS cluster,
    w.request_id AS request_id,
    w.generation AS generation,
    w.rank AS rank,
    w.chunk_index AS chunk_index,
    w.landed_at AS landed_at,
    w.decode_engine AS decode_engine,
    w.page AS page,
    if(o.owner_request_id = '' OR (o.owner_request_id = w.request_id AND o.owner_generation = w.generation) OR o.owner_released_at <= w.landed_at,
       '', o.owner_request_id) AS victim_request_id,
    if(victim_request_id = '', 0, o.owner_generation) AS victim_generation
FROM
(
    SELECT s.cluster, s.request_id, s.generation, s.rank, s.chunk_index, s.end_time AS landed_at, toString(s.decode_engine_id) AS decode_engine, page
    FROM {db:Identifier}.spans AS s FINAL
    ARRAY JOIN s.pages AS page
    INNER JOIN
    (
        SELECT cluster, request_id, generation, assumeNotNull(release_at) AS released_at
        FROM {db:Identifier}.lifecycles
        WHERE late_writes > 0
          AND last_seen >= {from:DateTime64(9, 'UTC')}
          AND first_seen <= {to:DateTime64(9, 'UTC')}
          AND ({cluster:String} = '' OR cluster = {cluster:String})
          AND ({request_id:String} = '' OR request_id = {request_id:String})
    ) AS l ON s.cluster = l.cluster AND s.request_id = l.request_id AND s.generation = l.generation
    WHERE s.name = 'pd.transfer' AND s.transfer_status = 'ok' AND s.end_time > l.released_at
) AS w
ASOF LEFT JOIN
(
    SELECT
        a.cluster AS cluster,
        toString(a.engine_id) AS decode_engine,
        page,
        a.start_time AS allocated_at,
        a.request_id AS owner_request_id,
        a.generation AS owner_generation,
        if(r.has_release = 1, r.released_at, toDateTime64('2262-01-01 00:00:00', 9, 'UTC')) AS owner_released_at
    FROM {db:Identifier}.spans AS a FINAL
    ARRAY JOIN a.pages AS page
    LEFT JOIN
    (
        SELECT cluster, request_id, generation, min(start_time) AS released_at, 1 AS has_release
        FROM {db:Identifier}.spans
        WHERE name = 'pd.release' AND start_time >= {from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
        GROUP BY cluster, request_id, generation
    ) AS r ON a.cluster = r.cluster AND a.request_id = r.request_id AND a.generation = r.generation
    WHERE a.name = 'pd.kv.alloc'
      AND a.start_time >= {from:DateTime64(9, 'UTC')} - INTERVAL 1 DAY
      AND a.start_time <= {to:DateTime64(9, 'UTC')} + INTERVAL 1 DAY
) AS o ON w.cluster = o.cluster AND w.decode_engine = o.decode_engine AND w.page = o.page AND w.landed_at >= o.allocated_at
ORDER BY cluster, request_id, generation, landed_at, rank, chunk_index, page
