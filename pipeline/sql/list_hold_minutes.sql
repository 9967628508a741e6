-- Every (cluster, minute) in which a stored hold started: the minutes a rebuild of the hold minutes (migration 0010)
-- computes. Without FINAL: an older version of a record names a minute its newest may have left, which then gets
-- an empty row.
SELECT DISTINCT cluster, toString(toStartOfMinute(assumeNotNull(hold_start)), 'UTC') AS minute
FROM {db:Identifier}.lifecycle_holds
WHERE hold_start IS NOT NULL
