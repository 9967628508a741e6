-- name: hold_resolution_groups
-- purpose: Holds resolved by drain and by timeout, per decode engine, per backend, per prefill/decode version pair and per (prefill version, decode version, backend) pairing, for the timeout_heavy and pairing_incompatible detections and the deployment review.
-- param from DateTime64(9, 'UTC'): holds starting in this time's minute or after it
-- param to DateTime64(9, 'UTC'): holds starting in this time's minute or before it (whole minutes: the window is widened to the minutes it touches)
-- param cluster String = '': one cluster, or all when empty
-- columns: scope_kind (decode_engine | backend | version_pair | pairing), cluster, decode_engine, backend, prefill_version, decode_version, holds, drained, timeouts, open
SELECT
    scope.1 AS scope_kind,
    cluster,
    scope.2 AS decode_engine,
    scope.3 AS backend,
    scope.4 AS prefill_version,
    scope.5 AS decode_version,
    sum(n) AS holds,
    sumIf(n, resolution = 'drained') AS drained,
    sumIf(n, resolution = 'timeout') AS timeouts,
    sumIf(n, resolution = 'open') AS open
FROM
(
    -- The hold minutes (migration 0010) list each minute's holds alike in every dimension once, counted: a window
    -- reads about one row a minute rather than every held record.
    SELECT
        cluster, g.resolution AS resolution, g.decode_engine AS h_decode_engine, g.backend AS h_backend,
        g.decode_version AS h_decode_version, g.prefill_versions AS prefill_versions, sum(g.holds) AS n
    FROM {db:Identifier}.hold_minutes FINAL
    ARRAY JOIN resolution_groups AS g
    WHERE minute >= toStartOfMinute({from:DateTime64(9, 'UTC')})
      AND minute <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, resolution, h_decode_engine, h_backend, h_decode_version, prefill_versions
) AS h
ARRAY JOIN arrayConcat(
    [('decode_engine', h_decode_engine, '', '', ''), ('backend', '', h_backend, '', '')],
    arrayFlatten(arrayMap(v -> [('version_pair', '', '', v, h_decode_version), ('pairing', '', h_backend, v, h_decode_version)], prefill_versions))
) AS scope
GROUP BY scope_kind, cluster, decode_engine, backend, prefill_version, decode_version
ORDER BY scope_kind, cluster, decode_engine, backend, prefill_version, decode_version
