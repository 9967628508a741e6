-- name: lifecycles_by_request
-- purpose: Every generation of one request id as lifecycle records, oldest generation first.
-- param request_id String: the request id (SGLang's bootstrap room), exactly as engines report it
-- param cluster String = '': restrict to one cluster (all clusters when empty)
-- columns: every field of the lifecycles view (see pipeline/migrations/0002_lifecycles_view.sql)
SELECT *
FROM {db:Identifier}.lifecycles
WHERE request_id = {request_id:String}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY cluster, generation
