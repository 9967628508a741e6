-- name: stale_acks_by_engine
-- purpose: Acks carrying another generation per decode engine: how many decode rejected, and how many it wrongly counted.
-- param from DateTime64(9, 'UTC'): start of the range
-- param to DateTime64(9, 'UTC'): end of the range
-- param cluster String = '': one cluster, or all when empty
-- columns: cluster, decode_engine, decode_version, lifecycles_with_stale_acks, stale_acks_accepted, stale_acks_rejected
SELECT
    cluster, decode_engine, decode_version,
    countIf(accepted + rejected > 0) AS lifecycles_with_stale_acks,
    sum(accepted) AS stale_acks_accepted,
    sum(rejected) AS stale_acks_rejected
FROM
(
    SELECT cluster, decode_engine, decode_version, stale_acks_accepted AS accepted, stale_acks_rejected AS rejected
    FROM {db:Identifier}.lifecycle_records FINAL
    WHERE bucket <= {to:DateTime64(9, 'UTC')}
      AND last_seen >= {from:DateTime64(9, 'UTC')}
      AND first_seen <= {to:DateTime64(9, 'UTC')}
      AND ({cluster:String} = '' OR cluster = {cluster:String})
) AS l
GROUP BY cluster, decode_engine, decode_version
HAVING lifecycles_with_stale_acks > 0
ORDER BY stale_acks_accepted DESC, stale_acks_rejected DESC
