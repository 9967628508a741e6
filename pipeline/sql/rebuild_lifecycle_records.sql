-- Recomputes the stored records of every lifecycle whose request id hashes into one part of `parts`: a backfill
-- (when migration 0003 is first applied to a database that already holds lifecycles, or after records were lost)
-- split into parts so that no statement merges every lifecycle at once.
INSERT INTO {db:Identifier}.lifecycle_records
SELECT *
FROM {db:Identifier}.lifecycle_record_rows
WHERE cityHash64(request_id) % {parts:UInt32} = {part:UInt32}
