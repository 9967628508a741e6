-- Recomputes the stored records of every lifecycle whose request id hashes into one part of `parts`: a backfill
-- (when migration 0003 is first applied to a database that already holds lifecycles, or after records were lost)
-- split into parts so that no statement merges every lifecycle at once.
INSERT INTO {db:Identifier}.lifecycle_records
SELECT *
FROM {db:Identifier}.lifecycle_record_rows
WHERE cityHash64(request_id) % {parts:UInt32} = {part:UInt32}
-- On a cluster the rows come back through this node and go out through the Distributed records, to every replica of
-- their shard: ClickHouse's default would run the INSERT on each shard into one replica's local table, which leaves
-- the other replicas without the records where the Distributed table itself replicates (node-by-node DDL).
SETTINGS parallel_distributed_insert_select = 0
