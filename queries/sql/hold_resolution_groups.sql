-- name: hold_resolution_groups
-- purpose: Holds resolved by drain and by timeout, per decode engine, per backend, per prefill/decode version pair and per (prefill version, decode version, backend) pairing, for the timeout_heavy and pairing_incompatible detections and the deployment review.
-- param from DateTime64(9, 'UTC'): holds starting at or after this time
-- param to DateTime64(9, 'UTC'): holds starting at or before this time
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
    SELECT
        cluster, resolution, decode_engine AS h_decode_engine, backend AS h_backend, decode_version AS h_decode_version,
        -- Each hold counts once per distinct prefill version it had (a hold whose prefill engine never reported, with
        -- no transfer or drain span, has no version pair to judge).
        arrayFilter(v -> v != '', arrayDistinct(arrayMap(p -> p.2, prefill_engines))) AS prefill_versions,
        -- Holds alike in every dimension are counted first: a few hundred groups, rather than every hold, then
        -- spread over the scopes (half the time at 90 k holds).
        count() AS n
    FROM {db:Identifier}.lifecycle_holds FINAL
    -- A hold in the range means a lifecycle active in it: the first two conditions let ClickHouse skip the rest.
    WHERE bucket <= {to:DateTime64(9, 'UTC')} AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND hold_start IS NOT NULL
      AND hold_start >= {from:DateTime64(9, 'UTC')}
      AND hold_start <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
    GROUP BY cluster, resolution, h_decode_engine, h_backend, h_decode_version, prefill_versions
) AS h
ARRAY JOIN arrayConcat(
    [('decode_engine', h_decode_engine, '', '', ''), ('backend', '', h_backend, '', '')],
    arrayFlatten(arrayMap(v -> [('version_pair', '', '', v, h_decode_version), ('pairing', '', h_backend, v, h_decode_version)], prefill_versions))
) AS scope
GROUP BY scope_kind, cluster, decode_engine, backend, prefill_version, decode_version
ORDER BY scope_kind, cluster, decode_engine, backend, prefill_version, decode_version
