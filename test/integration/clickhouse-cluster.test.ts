import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '@clickhouse/client';
import { startClickHouseCluster, type ClickHouseCluster, type ClickHouseNode } from '../support/clickhouse-cluster.ts';
import { clickhouseClient } from '../support/clickhouse-server.ts';

const DB = 'holdscope_cluster';
const ROWS = 10_000;
const MEMORY_PER_NODE = 2 * 1024 ** 3;
// Every replica written by the INSERT itself (internal_replication=false), all of them before it returns.
const SYNC_INSERT = { insert_distributed_sync: 1 } as const;

function rssMiB(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return kib ? Math.round(Number(kib) / 1024) : -1;
}

async function rows<T>(client: ClickHouseClient, query: string): Promise<T[]> {
  const result = await client.query({ query, format: 'JSONEachRow' });
  return result.json<T>();
}

async function count(client: ClickHouseClient, table: string): Promise<number> {
  const [row] = await rows<{ n: number }>(client, `SELECT count() AS n FROM ${table}`);
  return row?.n ?? -1;
}

function eventRows(from: number, n: number): { id: number; name: string }[] {
  return Array.from({ length: n }, (_, i) => ({ id: from + i, name: `event-${from + i}` }));
}

describe('ClickHouse cluster of 2 shards x 2 replicas (test/support/clickhouse-cluster.ts)', { timeout: 90_000 }, () => {
  let cluster: ClickHouseCluster;
  const clients = new Map<ClickHouseNode, ClickHouseClient>();
  const client = (node: ClickHouseNode): ClickHouseClient => clients.get(node)!;
  let startMs = 0;

  before(async () => {
    const started = performance.now();
    cluster = await startClickHouseCluster({ shards: 2, replicas: 2, memoryPerNodeBytes: MEMORY_PER_NODE });
    startMs = performance.now() - started;
    for (const node of cluster.nodes) clients.set(node, clickhouseClient(node.url));
  });

  after(async () => {
    await Promise.all([...clients.values()].map((c) => c.close()));
    await cluster?.stop();
  });

  it('lists 2 shards x 2 replicas with the chosen ports in system.clusters, and each node its own macros', async (t) => {
    const expected = cluster.nodes
      .map((n) => ({ shard_num: n.shard, replica_num: n.replica, port: n.tcpPort }))
      .sort((a, b) => a.port - b.port);
    for (const node of cluster.nodes) {
      const listed = await rows<{ shard_num: number; replica_num: number; port: number }>(
        client(node),
        `SELECT shard_num, replica_num, port FROM system.clusters WHERE cluster = '${cluster.name}' ORDER BY port`,
      );
      assert.deepEqual(listed, expected, `system.clusters on ${node.label}`);
      const macros = await rows<{ macro: string; substitution: string }>(
        client(node),
        'SELECT macro, substitution FROM system.macros ORDER BY macro',
      );
      assert.deepEqual(macros, [
        { macro: 'replica', substitution: String(node.replica) },
        { macro: 'shard', substitution: String(node.shard) },
      ]);
      const [memory] = await rows<{ value: string }>(
        client(node),
        "SELECT value FROM system.server_settings WHERE name = 'max_server_memory_usage'",
      );
      assert.equal(Number(memory?.value), MEMORY_PER_NODE, `max_server_memory_usage on ${node.label}`);
    }
    const rss = cluster.nodes.map((n) => rssMiB(n.pid));
    t.diagnostic(`4 nodes ready in ${startMs.toFixed(0)} ms; RSS per node ${rss.join(', ')} MiB`);
  });

  it('lands a sync insert through Distributed on both replicas of its shard and reads it back from every node', async () => {
    await cluster.runOnEveryNode(`CREATE DATABASE IF NOT EXISTS ${DB}`);
    await cluster.runOnEveryNode(`CREATE TABLE ${DB}.events_local (id UInt64, name String) ENGINE = MergeTree ORDER BY id`);
    await cluster.runOnEveryNode(
      `CREATE TABLE ${DB}.events AS ${DB}.events_local ENGINE = Distributed(${cluster.name}, ${DB}, events_local, cityHash64(id))`,
    );
    await client(cluster.node(1, 1)).insert({
      table: `${DB}.events`,
      values: eventRows(0, ROWS),
      format: 'JSONEachRow',
      clickhouse_settings: SYNC_INSERT,
    });

    const perShard: number[] = [];
    for (const shard of [1, 2]) {
      const [a, b] = [cluster.node(shard, 1), cluster.node(shard, 2)];
      const digest = `SELECT count() AS n, sum(cityHash64(id, name)) AS h, countIf(cityHash64(id) % 2 != ${shard - 1}) AS misplaced FROM ${DB}.events_local`;
      const [onA] = await rows<{ n: number; h: number; misplaced: number }>(client(a), digest);
      const [onB] = await rows<{ n: number; h: number; misplaced: number }>(client(b), digest);
      assert.deepEqual(onA, onB, `replicas of shard ${shard} hold the same rows`);
      assert.equal(onA?.misplaced, 0, `every row on shard ${shard} is one cityHash64 sends there`);
      assert.ok((onA?.n ?? 0) > ROWS / 4, `shard ${shard} holds a fair share: ${onA?.n}`);
      perShard.push(onA?.n ?? 0);
    }
    assert.equal(perShard[0]! + perShard[1]!, ROWS);
    for (const node of cluster.nodes) assert.equal(await count(client(node), `${DB}.events`), ROWS, `Distributed read from ${node.label}`);
    cluster.assertAllAlive();
  });

  it('with a replica killed: reads fall back, a sync insert fails with Code 210 and keeps no rows, the node is reported', async () => {
    const victim = cluster.node(2, 2);
    const survivors = cluster.nodes.filter((n) => n !== victim);
    const localBefore = await Promise.all(survivors.map((n) => count(client(n), `${DB}.events_local`)));
    await victim.kill();

    for (const node of survivors) assert.equal(await count(client(node), `${DB}.events`), ROWS, `fallback read from ${node.label}`);

    const insert = client(cluster.node(1, 1)).insert({
      table: `${DB}.events`,
      values: eventRows(ROWS, 1000),
      format: 'JSONEachRow',
      clickhouse_settings: SYNC_INSERT,
    });
    await assert.rejects(insert, (err: Error & { code?: string }) => {
      assert.equal(err.code, '210', err.message);
      assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${victim.tcpPort}`), 'names the unreachable replica');
      return true;
    });
    const localAfter = await Promise.all(survivors.map((n) => count(client(n), `${DB}.events_local`)));
    assert.deepEqual(localAfter, localBefore, 'no node kept any row of the failed insert');

    assert.deepEqual(
      cluster.deadNodes().map((d) => d.node),
      [victim],
    );
    assert.throws(
      () => cluster.assertAllAlive(),
      (err: Error) => {
        assert.match(err.message, /1 of 4 nodes dead: shard 2 replica 2 \(http \d+, tcp \d+\): killed by SIGKILL$/);
        return true;
      },
    );
  });

  it('restart brings the killed replica back with its rows, and sync inserts work again', async () => {
    const victim = cluster.node(2, 2);
    await victim.restart();
    cluster.assertAllAlive();
    assert.equal(victim.lastExit, undefined);
    assert.equal(
      await count(client(victim), `${DB}.events_local`),
      await count(client(cluster.node(2, 1)), `${DB}.events_local`),
      'the restarted replica kept its rows',
    );

    await client(victim).insert({
      table: `${DB}.events`,
      values: eventRows(ROWS, 1000),
      format: 'JSONEachRow',
      clickhouse_settings: SYNC_INSERT,
    });
    for (const node of cluster.nodes)
      assert.equal(await count(client(node), `${DB}.events`), ROWS + 1000, `Distributed read from ${node.label}`);
    for (const shard of [1, 2]) {
      assert.equal(
        await count(client(cluster.node(shard, 1)), `${DB}.events_local`),
        await count(client(cluster.node(shard, 2)), `${DB}.events_local`),
        `replicas of shard ${shard} agree after the restart`,
      );
    }
  });
});
