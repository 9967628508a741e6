-- Recomputes the stored records (migration 0003) of the given lifecycles from all their states: run by the
-- pipeline after each INSERT of spans, for the lifecycles those spans belong to. The key filter reaches the
-- states' primary key through the views, so the cost follows the number of keys, not the table.
-- On a cluster the plain names are Distributed tables: the key filter is sent to every shard, each merges the states
-- of its own lifecycles (all of a lifecycle's spans are on one shard), and the records written are sharded by the
-- same key, so each lands on its lifecycle's shard, whose materialized views find its spans there
-- (test/integration/cluster-mode.test.ts: the same records as one node).
INSERT INTO {db:Identifier}.lifecycle_records
SELECT *
FROM {db:Identifier}.lifecycle_record_rows
-- The keys come in four parameters (pipeline/records.ts: a server refuses one form field over ~128 KB), some empty.
WHERE (cluster, request_id, generation) IN arrayConcat(
    {keys_0:Array(Tuple(String, String, UInt32))}, {keys_1:Array(Tuple(String, String, UInt32))},
    {keys_2:Array(Tuple(String, String, UInt32))}, {keys_3:Array(Tuple(String, String, UInt32))})
-- On a cluster the rows come back through this node and go out through the Distributed records, to every replica of
-- their shard: ClickHouse's default would run the INSERT on each shard into one replica's local table, which leaves
-- the other replicas without the records where the Distributed table itself replicates (node-by-node DDL).
SETTINGS parallel_distributed_insert_select = 0
