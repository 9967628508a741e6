-- name: lifecycles_by_requests
-- purpose: Every generation of each listed request id as lifecycle records, by request id then oldest generation first: many lookups in one read (each read of the lifecycles view costs tens of ms to plan, whatever it reads).
-- param request_ids Array(String): the request ids (SGLang's bootstrap rooms), exactly as engines report them; as text (CLI, /api/queries) ['a','b'], a quote or a backslash inside an id doubled
-- param cluster String = '': restrict to one cluster (all clusters when empty)
-- columns: every field of the lifecycles view (see pipeline/migrations/0002_lifecycles_view.sql)
SELECT *
FROM {db:Identifier}.lifecycles
WHERE request_id IN {request_ids:Array(String)}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY request_id, cluster, generation
