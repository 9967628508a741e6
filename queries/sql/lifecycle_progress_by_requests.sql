-- name: lifecycle_progress_by_requests
-- purpose: How far each listed request's lifecycles have come (first and last span stored, resolution so far), by request id then oldest generation first: the check a poller or a script waiting for requests runs, at about a quarter of the cost of the full records (lifecycles_by_requests), because ClickHouse plans only the view's columns it reads.
-- param request_ids Array(String): the request ids (SGLang's bootstrap rooms), exactly as engines report them; as text (CLI, /api/queries) ['a','b'], a quote or a backslash inside an id doubled
-- param cluster String = '': restrict to one cluster (all clusters when empty)
-- columns: cluster, request_id, generation, first_seen and last_seen (the earliest start and latest end of its spans stored so far), resolution (as in the lifecycles view)
SELECT cluster, request_id, generation, first_seen, last_seen, resolution
FROM {db:Identifier}.lifecycles
WHERE request_id IN {request_ids:Array(String)}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY request_id, cluster, generation
