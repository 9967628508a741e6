-- The (cluster, minute) pairs in which a hold of the given lifecycles started: every hold span each has, not only
-- the first its record keeps, so a hold that moved to an earlier minute leaves its old one computed again too.
-- Read from the states by their primary key, as the record refresh reads them.
SELECT DISTINCT cluster, toString(toStartOfMinute(h.1), 'UTC') AS minute
FROM {db:Identifier}.lifecycle_states
ARRAY JOIN holds AS h
WHERE (cluster, request_id, generation) IN arrayConcat(
    {keys_0:Array(Tuple(String, String, UInt32))}, {keys_1:Array(Tuple(String, String, UInt32))},
    {keys_2:Array(Tuple(String, String, UInt32))}, {keys_3:Array(Tuple(String, String, UInt32))})
ORDER BY minute, cluster
