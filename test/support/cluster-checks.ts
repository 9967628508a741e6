/**
 * What the tests on a ClickHouse cluster (clickhouse-cluster.ts) share: the watchdog that restarts a node chdb aborted
 * by itself, where a lifecycle's rows belong, and the check that every replica of a shard holds the same rows.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { TupleParam, type ClickHouseClient } from '@clickhouse/client';
import type { ClickHouseCluster, ClickHouseNode } from './clickhouse-cluster.ts';

export interface NodeWatchdog {
  /** Each restart so far: `label (how it ended)`. */
  readonly restarts: readonly string[];
  /** A node the test took down on purpose: left down until `release`. */
  holdDown(node: ClickHouseNode): void;
  release(node: ClickHouseNode): void;
  stop(): void;
}

/**
 * chdb's server aborts now and then (SIGABRT, nothing on stderr) while it opens a session for a connection from another
 * node, about once a run under load on 2 cores. The watchdog restarts such a node within 200 ms: what it stands for is
 * a replica lost and back, which the cluster must survive, and the restarts are named in the test's diagnostics.
 */
export function watchNodes(cluster: ClickHouseCluster): NodeWatchdog {
  const restarts: string[] = [];
  const restarting = new Set<ClickHouseNode>();
  const heldDown = new Set<ClickHouseNode>();
  const timer = setInterval(() => {
    for (const { node, exit } of cluster.deadNodes()) {
      if (restarting.has(node) || heldDown.has(node)) continue;
      restarting.add(node);
      restarts.push(`${node.label} (${exit})`);
      void node.restart().finally(() => restarting.delete(node));
    }
  }, 200);
  return {
    restarts,
    holdDown: (node) => heldDown.add(node),
    release: (node) => heldDown.delete(node),
    stop: () => clearInterval(timer),
  };
}

/** The shard (1-based) a Distributed table sharded by cityHash64(cluster, request_id) over 2 shards sends each key to. */
export async function shardOf(
  client: ClickHouseClient,
  keys: readonly { cluster: string; request_id: string }[],
): Promise<Map<string, number>> {
  const result = await client.query({
    query:
      'SELECT k.1 AS cluster, k.2 AS request_id, cityHash64(k.1, k.2) % 2 + 1 AS shard FROM (SELECT arrayJoin({keys:Array(Tuple(String, String))}) AS k)',
    query_params: { keys: keys.map((k) => new TupleParam([k.cluster, k.request_id])) },
    format: 'JSONEachRow',
  });
  const out = new Map<string, number>();
  for (const r of await result.json<{ cluster: string; request_id: string; shard: number }>())
    out.set(`${r.cluster}/${r.request_id}`, r.shard);
  return out;
}

/** The per-lifecycle tables and the columns that identify a row of each. */
const SHARDED_TABLES = [
  ['spans', 'request_id, generation, name, trace_id, span_id'],
  ['lifecycle_states', 'request_id, generation'],
  ['lifecycle_records', 'bucket, request_id, generation, is_deleted'],
  ['page_allocations', 'allocated_at, request_id, generation'],
] as const;

/**
 * Every row of every per-lifecycle table on the shard its key hashes to, every shard holding some, and both replicas of
 * a shard holding the same rows (read with FINAL: an INSERT retried after a replica failed may have left a second copy
 * on the other until a merge). A replica that was down and missed a write would differ here.
 */
export async function assertReplicasAgree(
  client: (shard: number, replica: number) => ClickHouseClient,
  database: string,
  label: string,
): Promise<void> {
  for (const [table, identity] of SHARDED_TABLES) {
    for (const shard of [1, 2]) {
      const digest =
        `SELECT count() AS n, sum(cityHash64(${identity})) AS h, countIf(cityHash64(cluster, request_id) % 2 + 1 != ${shard}) AS misplaced ` +
        `FROM ${database}.${table}_local FINAL`;
      const read = async (replica: number) =>
        (
          await (
            await client(shard, replica).query({ query: digest, format: 'JSONEachRow' })
          ).json<{ n: number; h: string; misplaced: number }>()
        )[0];
      const [a, b] = await Promise.all([read(1), read(2)]);
      assert.deepEqual(a, b, `${label}: replicas of shard ${shard} hold the same ${table}`);
      assert.equal(a?.misplaced, 0, `${label}: ${table} on shard ${shard}`);
      assert.ok((a?.n ?? 0) > 0, `${label}: shard ${shard} holds ${table}`);
    }
  }
}

/** Attempts of a check: chdb aborts more often under load, and each abort costs the check that met it. */
const CHECK_ATTEMPTS = 5;

/**
 * Runs a read-only `check` again (CHECK_ATTEMPTS in all) when a node died under it, once every node is back: a chdb abort
 * costs a read on that node (the read API answers 503), which a page would ask again. A failure while every node
 * stayed up is the check's own and is thrown at once. Each retry is noted in `retried`.
 */
export async function checkDespiteAborts<T>(
  cluster: ClickHouseCluster,
  watchdog: NodeWatchdog,
  what: string,
  check: () => Promise<T>,
  retried: string[],
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const restartsBefore = watchdog.restarts.length;
    try {
      return await check();
    } catch (error) {
      const nodeDied = watchdog.restarts.length > restartsBefore || cluster.deadNodes().length > 0;
      if (attempt === CHECK_ATTEMPTS || !nodeDied) throw error;
      retried.push(`${what} (${(error as Error).message.split('\n')[0]?.slice(0, 120)})`);
      const deadline = Date.now() + 60_000;
      while (cluster.deadNodes().length > 0 && Date.now() < deadline) await sleep(200);
      cluster.assertAllAlive();
    }
  }
}
