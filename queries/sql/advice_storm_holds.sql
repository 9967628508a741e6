-- name: advice_storm_holds
-- purpose: The holds of one decode engine starting in a range (the worst abort storm's window and as long before it as a hold may last), with their start, release and size, so the hold-timeout advice can pin them again with each hold cut at the advised timeout (queries/advice.ts).
-- param from DateTime64(9, 'UTC'): holds starting at or after this time
-- param to DateTime64(9, 'UTC'): holds starting at or before this time
-- param cluster String = '': one cluster, or all when empty
-- param decode_engine String: the decode engine
-- columns: hold_start_ms (epoch ms), release_ms (epoch ms, null while open), resolution, held_slots
SELECT
    toUnixTimestamp64Milli(assumeNotNull(hold_start)) AS hold_start_ms,
    if(release_at IS NULL, NULL, toUnixTimestamp64Milli(assumeNotNull(release_at))) AS release_ms,
    resolution,
    toUInt64(held_slots) AS held_slots
FROM {db:Identifier}.lifecycle_holds FINAL
WHERE bucket <= {to:DateTime64(9, 'UTC')}
  AND last_seen >= {from:DateTime64(9, 'UTC')}
  AND hold_start IS NOT NULL
  AND hold_start >= {from:DateTime64(9, 'UTC')}
  AND hold_start <= {to:DateTime64(9, 'UTC')}
  AND decode_engine = {decode_engine:String}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY hold_start_ms
