-- Recomputes the stored records (migration 0003) of the given lifecycles from all their states: run by the
-- pipeline after each INSERT of spans, for the lifecycles those spans belong to. The key filter reaches the
-- states' primary key through the views, so the cost follows the number of keys, not the table.
INSERT INTO {db:Identifier}.lifecycle_records
SELECT *
FROM {db:Identifier}.lifecycle_record_rows
WHERE (cluster, request_id, generation) IN {keys:Array(Tuple(String, String, UInt32))}
