/**
 * holdscope's cluster mode on a 2-shard x 2-replica ClickHouse (test/support/clickhouse-cluster.ts): the schema
 * created node by node (`ddl: 'node-by-node'`: chdb has no ON CLUSTER and no Replicated engines), spans written
 * through the Distributed tables with sync inserts, records refreshed through them, and every answer of the read API
 * equal to a single-node database fed the same spans by the same collector (a queue that hands each batch to both
 * writers), on a fifth chdb server of its own.
 *
 * A node chdb aborts by itself is restarted by a watchdog (test/support/cluster-checks.ts) and named in the test's
 * diagnostics: reads fall back to the other replica; a sync INSERT fails and the writer retries it until every replica
 * has it. test/faults/cluster-e2e.test.ts kills a replica on purpose.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClickHouseClient } from '@clickhouse/client';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { RetryableResult } from '../../common/index.ts';
import type { DeadLetter, SpanMessage, SpanQueue } from '../../contract/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { buildScenario, runSimulation, type LifecycleTruth, type ScenarioName } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue, migrate, storageConfigSchema } from '../../pipeline/index.ts';
import { loadMigrations, migrateStorage } from '../../pipeline/migrate.ts';
import { startClickHouseCluster, type ClickHouseCluster, type ClickHouseNode } from '../support/clickhouse-cluster.ts';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from '../support/clickhouse-server.ts';
import { assertReplicasAgree, shardOf, watchNodes, type NodeWatchdog } from '../support/cluster-checks.ts';
import { quietLog } from '../support/stack.ts';

const CLUSTERED = 'hs_cluster';
const SINGLE = 'hs_single';
const RETENTION_DAYS = 30;

/**
 * Hands every batch to each queue; stored (success) once every one stored it. A queue that answers "retry" (its
 * ClickHouse node restarting after a chdb abort) is given the batch again after the wait it asks for, as Kafka would
 * give it to the pipeline again: the spans must reach both stores whatever happens to a node.
 */
class TeeQueue implements SpanQueue {
  constructor(private readonly queues: readonly SpanQueue[]) {}
  async start(): Promise<void> {
    for (const q of this.queues) await q.start();
  }
  healthy(): boolean {
    return this.queues.every((q) => q.healthy());
  }
  async publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    const results = await Promise.all(this.queues.map((q) => this.publishUntilStored(q, messages, deadLetters)));
    return results.find((r) => r.kind !== 'success') ?? results[0]!;
  }
  private async publishUntilStored(queue: SpanQueue, messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    const deadline = Date.now() + 90_000;
    for (;;) {
      const result = await queue.publish(messages, deadLetters);
      if (result.kind === 'success' || Date.now() > deadline) return result;
      await sleep(result.afterMs);
    }
  }
  async flush(): Promise<void> {
    await Promise.all(this.queues.map((q) => q.flush()));
  }
  async shutdown(): Promise<void> {
    await Promise.all(this.queues.map((q) => q.shutdown()));
  }
}

async function rows<T>(client: ClickHouseClient, query: string): Promise<T[]> {
  const result = await client.query({ query, format: 'JSONEachRow' });
  return result.json<T>();
}

/** One writer per database (the cluster's over a client of shard 1 replica 1, as a pipeline would hold one). */
function writerQueue(client: ClickHouseClient, database: string): InProcessQueue {
  const metrics = createPipelineMetrics();
  const writer = createWriter(client, { database, maxBatchRows: 50_000, lingerMs: 20 }, metrics, quietLog);
  return new InProcessQueue(writer, { maxPendingSpans: 1_000_000, timeoutMs: 60_000, metrics, log: quietLog });
}

/** Runs a scenario into both databases through one collector; the spans and truth it produced. */
async function feedBoth(
  clusterClient: ClickHouseClient,
  singleClient: ClickHouseClient,
  name: ScenarioName,
  seed: number,
  requests: number,
  startTimeMs: number,
): Promise<{ spans: number; truth: LifecycleTruth[] }> {
  const queue = new TeeQueue([writerQueue(clusterClient, CLUSTERED), writerQueue(singleClient, SINGLE)]);
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  try {
    const { config } = buildScenario(name, seed);
    config.requests = requests;
    config.idPrefix = `${name}-${seed}`;
    const endpoint = `http://127.0.0.1:${port}`;
    // Room for a batch held while a node restarts (TeeQueue): the exporter's own 10 s would count it as failed.
    const exporterFor = () => new OTLPTraceExporter({ url: `${endpoint}/v1/traces`, timeoutMillis: 120_000 });
    const summary = await runSimulation({ config, endpoint, startTimeMs, pace: 'fast', exporterFor });
    assert.equal(summary.spansFailed, 0, `${name}: spans the collector did not accept`);
    await queue.flush();
    return { spans: summary.spansEmitted, truth: summary.truth };
  } finally {
    await collector.shutdown();
  }
}

/**
 * Fields that say when an answer was made, not what it found: how long open holds have been held so far (to now), and
 * when the records were computed (each store computed its own). Closed holds' times are compared in the records.
 */
const CLOCK_FIELDS = new Set(['open_ms', 'oldest_open_ms', 'held_ms', 'lastComputedAt', 'last_computed_at']);

/**
 * An answer without what depends on when it was asked or computed (how long a hold has been open: the two APIs
 * answer a few ms apart), so that what remains must be equal.
 */
function withoutClock(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutClock);
  if (typeof value === 'string') return value.replace(/has been open \d+ s/g, 'has been open N s');
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => !CLOCK_FIELDS.has(key))
      .map(([key, v]) => [key, withoutClock(v)]),
  );
}

describe('cluster mode, node by node, on 2 shards x 2 replicas', { timeout: 150_000 }, () => {
  let cluster: ClickHouseCluster;
  const clients = new Map<ClickHouseNode, ClickHouseClient>();
  const client = (shard: number, replica: number): ClickHouseClient => clients.get(cluster.node(shard, replica))!;
  /** A failure with a dead node says which and how it ended (a bare ECONNRESET otherwise). */
  const guarded =
    <C>(body: (t: C) => Promise<void>) =>
    async (t: C): Promise<void> => {
      try {
        await body(t);
      } catch (error) {
        if (restarts().length > 0)
          throw new Error(`${(error as Error).message}\n(nodes restarted: ${restarts().join('; ')})`, { cause: error });
        throw error;
      }
    };
  const schema = () => ({ database: CLUSTERED, cluster: cluster.name, ddl: 'node-by-node' as const, retentionDays: RETENTION_DAYS });

  let single: ClickHouseServer;
  let singleClient: ClickHouseClient;
  let watchdog: NodeWatchdog | undefined;
  const restarts = (): readonly string[] => watchdog?.restarts ?? [];
  /** Set once both schemas exist: the feeding tests fail at once without them rather than wait on the writers. */
  let schemaReady = false;
  /** Read API answers asked again because a node aborted under them. */
  const retriedReads: string[] = [];

  before(async () => {
    [cluster, single] = await Promise.all([startClickHouseCluster({ shards: 2, replicas: 2 }), startClickHouseServer()]);
    singleClient = clickhouseClient(single.url);
    for (const node of cluster.nodes) clients.set(node, clickhouseClient(node.url));
    watchdog = watchNodes(cluster);
  });

  after(async () => {
    watchdog?.stop();
    await Promise.all([...clients.values(), singleClient].map((c) => c?.close()));
    await Promise.all([cluster?.stop(), single?.stop()]);
  });

  it(
    'creates the schema on every node: _local tables on plain engines, Distributed fronts, schema_migrations per node',
    guarded(async (t) => {
      const started = performance.now();
      const nodes = cluster.nodes.map((n) => clients.get(n)!);
      // As `holdscope migrate` would be configured for it: the cluster, node-by-node DDL and every node's URL.
      const config = storageConfigSchema.parse({
        clickhouseUrl: cluster.node(1, 1).url,
        database: CLUSTERED,
        clickhouseCluster: cluster.name,
        clickhouseClusterDdl: 'node-by-node',
        clickhouseNodes: cluster.nodes.map((n) => n.url).join(','),
        retentionDays: RETENTION_DAYS,
      });
      const { applied } = await migrateStorage(client(1, 1), config, quietLog);
      const ms = performance.now() - started;
      const versions = loadMigrations(schema()).map((m) => m.version);
      assert.equal(applied.length, versions.length);
      await migrate(singleClient, { database: SINGLE, retentionDays: RETENTION_DAYS }, quietLog);

      const expected = await rows<{ name: string; engine: string }>(
        client(1, 1),
        `SELECT name, engine FROM system.tables WHERE database = '${CLUSTERED}' ORDER BY name`,
      );
      const distributed = expected.filter((r) => r.engine === 'Distributed').map((r) => r.name);
      assert.deepEqual(distributed, [
        'hold_minutes',
        'late_write_pages',
        'lifecycle_arms',
        'lifecycle_flags',
        'lifecycle_holds',
        'lifecycle_record_rows',
        'lifecycle_records',
        'lifecycle_states',
        'lifecycles',
        'page_allocations',
        'span_dead_letters',
        'spans',
      ]);
      for (const name of distributed)
        assert.ok(
          expected.some((r) => r.name === `${name}_local` && /MergeTree$|^View$/.test(r.engine)),
          name,
        );
      assert.ok(expected.every((r) => !r.engine.startsWith('Replicated')));
      for (const node of cluster.nodes) {
        const c = clients.get(node)!;
        assert.deepEqual(
          await rows(c, `SELECT name, engine FROM system.tables WHERE database = '${CLUSTERED}' ORDER BY name`),
          expected,
          node.label,
        );
        const recorded = await rows<{ version: number }>(c, `SELECT version FROM ${CLUSTERED}.schema_migrations ORDER BY version`);
        assert.deepEqual(
          recorded.map((r) => r.version),
          versions,
          `schema_migrations on ${node.label}`,
        );
      }
      assert.deepEqual((await migrate(client(2, 2), { ...schema(), nodes }, quietLog)).applied, [], 'a second run applies nothing');
      schemaReady = true;
      t.diagnostic(`${versions.length} migrations on 4 nodes in ${ms.toFixed(0)} ms; ${expected.length} tables and views per node`);
    }),
  );

  it('without the nodes, node-by-node DDL refuses to start rather than create the schema on one node', async () => {
    await assert.rejects(migrate(client(1, 1), schema()), /node-by-node DDL needs the URL of every node/);
  });

  for (const [scenario, seed, requests] of [
    ['mixed', 11, 600],
    ['late-write-bug', 12, 400],
  ] as const) {
    it(
      `${scenario}: spans on their shard, records and every read API answer equal to one node fed the same spans`,
      guarded(async (t) => {
        assert.ok(schemaReady, 'the schema step failed');
        const startTimeMs = Date.now() - 3_600_000;
        const fed = performance.now();
        const { spans, truth } = await feedBoth(client(1, 1), singleClient, scenario, seed, requests, startTimeMs);
        t.diagnostic(`${spans} spans, ${truth.length} lifecycles into both in ${(performance.now() - fed).toFixed(0)} ms`);
        await assertReplicasAgree(client, CLUSTERED, scenario);
        await assertSameStoredRows(scenario);
        const compared = await assertSameAnswers(startTimeMs, truth);
        t.diagnostic(`${compared} read API answers equal`);
        if (scenario === 'late-write-bug') {
          await assertCrossShardVictims(t, startTimeMs);
          await assertBackfillFindsTheLateWrites();
        }
        if (restarts().length > 0) t.diagnostic(`chdb nodes that aborted and were restarted so far: ${restarts().join('; ')}`);
        if (retriedReads.length > 0) t.diagnostic(`reads asked again after a node abort: ${retriedReads.join(', ')}`);
      }),
    );
  }

  /** The stored tables' live rows (FINAL, through Distributed) equal the single node's, but for when they were computed. */
  async function assertSameStoredRows(scenario: string): Promise<void> {
    for (const [table, order] of [
      ['spans', 'cluster, request_id, generation, name, trace_id, span_id'],
      ['lifecycle_records', 'bucket, cluster, request_id, generation'],
      ['lifecycle_flags', 'bucket, cluster, request_id, generation'],
      ['lifecycle_holds', 'bucket, cluster, request_id, generation'],
      ['late_write_pages', 'cluster, request_id, generation, span_id'],
      ['page_allocations', 'allocated_at, cluster, request_id, generation'],
      ['hold_minutes', 'minute, cluster'],
    ] as const) {
      const except = table === 'spans' ? 'ingested_at' : table === 'late_write_pages' ? '' : 'computed_at';
      // A minute's arrays are groupArray()s, in whatever order the shards' partial results merged: compared as sets.
      const columns = table === 'hold_minutes' ? 'cluster, minute, arraySort(resolution_groups), arraySort(tails)' : '*';
      const select = (db: string) =>
        `SELECT ${columns} ${except && columns === '*' ? `EXCEPT (${except})` : ''} FROM ${db}.${table} FINAL ` +
        `${table.startsWith('lifecycle_') ? 'WHERE is_deleted = 0' : ''} ORDER BY ${order}`;
      const lines = async (c: ClickHouseClient, db: string) =>
        (await (await c.query({ query: select(db), format: 'JSONEachRow' })).text()).split('\n');
      const [onCluster, onOne] = await Promise.all([lines(client(2, 1), CLUSTERED), lines(singleClient, SINGLE)]);
      assert.ok(onOne.length > 1, `${scenario}: ${table} has rows`);
      const differs = onOne.findIndex((line, i) => onCluster[i] !== line);
      assert.equal(onCluster.length, onOne.length, `${scenario}: ${table} rows through the cluster = on one node`);
      assert.equal(onCluster[differs]?.slice(0, 600), onOne[differs]?.slice(0, 600), `${scenario}: ${table} row ${differs}`);
    }
  }

  /** Every read API answer over the window, from an API on the cluster (through shard 2) and one on the single node. */
  async function assertSameAnswers(startTimeMs: number, truth: LifecycleTruth[]): Promise<number> {
    const [clusterApi, singleApi] = await Promise.all([
      startHttpServer({ port: 0, host: '127.0.0.1', client: client(2, 2), database: CLUSTERED, log: quietLog }),
      startHttpServer({ port: 0, host: '127.0.0.1', client: singleClient, database: SINGLE, log: quietLog }),
    ]);
    try {
      const from = encodeURIComponent(new Date(startTimeMs - 60_000).toISOString());
      // In the past, so that what extends to now (an open hold's pinned slots, kv_pinned's windows) ends there for
      // both answers, asked a moment apart; every span is an hour older.
      const to = encodeURIComponent(new Date(Date.now() - 1000).toISOString());
      const window = `from=${from}&to=${to}`;
      const ids = [...new Set(truth.map((l) => l.request_id))];
      const late = truth.find((l) => l.late_writes.length > 0)?.request_id ?? ids[0]!;
      const paths = [
        `/api/flags?${window}`,
        `/api/flags?${window}&limit_per_kind=3`,
        `/api/incidents?${window}`,
        `/api/lifecycles?${ids
          .slice(0, 150)
          .map((id) => `request_id=${encodeURIComponent(id)}`)
          .join('&')}`,
        `/api/lifecycles/${encodeURIComponent(late)}`,
        `/api/queries/request_timeline?request_id=${encodeURIComponent(late)}`,
        `/api/queries/late_write_victims?${window}`,
        `/api/queries/late_write_victims?${window}&writers_per_cluster=2`,
        `/api/queries/hold_resolution_groups?${window}`,
        `/api/queries/transfer_tails?${window}`,
        `/api/queries/transfer_tails?${window}&by_decode_engine=1`,
        `/api/queries/kv_pinned?${window}`,
        `/api/queries/kv_pinned?${window}&with_aborts_only=1`,
        `/api/queries/longest_holds?${window}`,
        `/api/queries/open_holds?${window}`,
        `/api/queries/resolution_mix?${window}`,
        `/api/queries/stale_acks_by_engine?${window}`,
        `/api/queries/incidents?${window}`,
        `/api/queries/flags_lifecycle?${window}`,
      ];
      for (const path of paths) {
        // A node that aborted mid-read (restarted by the watchdog) fails the read: 503 (codes 32, 210, 279), or 500
        // should it die with a code common/clickhouse.ts does not count transient. Asked again, as a page would, and
        // counted: only while a node was restarted.
        const ask = async (port: number) => {
          for (let attempt = 1; ; attempt++) {
            const res = await fetch(`http://127.0.0.1:${port}${path}`);
            const answer = { status: res.status, body: await res.text() };
            if ((answer.status !== 503 && answer.status !== 500) || restarts().length === 0 || attempt === 20) return answer;
            retriedReads.push(`${answer.status} ${path.split('?')[0]}`);
            await sleep(1000);
          }
        };
        const fromCluster = await ask(clusterApi.port);
        const fromOne = await ask(singleApi.port);
        assert.equal(fromOne.status, 200, `${path}: ${fromOne.body.slice(0, 500)}`);
        assert.equal(fromCluster.status, 200, `${path} on the cluster: ${fromCluster.body.slice(0, 500)}`);
        assert.ok(fromOne.body.length > 20, `${path}: ${fromOne.body}`);
        assert.deepEqual(withoutClock(JSON.parse(fromCluster.body)), withoutClock(JSON.parse(fromOne.body)), path);
      }
      return paths.length;
    } finally {
      await Promise.all([clusterApi.close(), singleApi.close()]);
    }
  }

  /**
   * Migration 0008's backfill, a join of two sharded tables run once through the Distributed tables, finds on the
   * cluster the late writes its materialized view stored as they came (it ran on an empty database at migration).
   */
  async function assertBackfillFindsTheLateWrites(): Promise<void> {
    const backfill = loadMigrations(schema())
      .flatMap((m) => m.statements)
      .find((st) => /INSERT INTO \w+\.late_write_pages\b/.test(st));
    const select = backfill?.replace(/^[\s\S]*?INSERT INTO \w+\.late_write_pages\s*/, '');
    assert.ok(select?.startsWith('SELECT'), 'the backfill of 0008');
    const digest = 'SELECT count() AS n, sum(cityHash64(request_id, span_id, landed_at)) AS h FROM';
    const [found] = await rows<{ n: number; h: string }>(client(2, 2), `${digest} (${select})`);
    const [stored] = await rows<{ n: number; h: string }>(client(2, 2), `${digest} ${CLUSTERED}.late_write_pages FINAL`);
    assert.ok((stored?.n ?? 0) > 0);
    assert.deepEqual(found, stored, 'late writes found by the backfill = those stored as they came');
  }

  /** Some late write's victim is a lifecycle of the other shard: the cluster answered a question that crosses shards. */
  async function assertCrossShardVictims(t: { diagnostic(message: string): void }, startTimeMs: number): Promise<void> {
    const api = await startHttpServer({ port: 0, host: '127.0.0.1', client: client(1, 2), database: CLUSTERED, log: quietLog });
    try {
      const window = `from=${encodeURIComponent(new Date(startTimeMs - 60_000).toISOString())}&to=${encodeURIComponent(new Date().toISOString())}`;
      const body = (await (await fetch(`http://127.0.0.1:${api.port}/api/queries/late_write_victims?${window}`)).json()) as {
        rows: { cluster: string; request_id: string; victim_request_id: string }[];
      };
      const pairs = body.rows.filter((r) => r.victim_request_id !== '');
      const shards = await shardOf(singleClient, [
        ...pairs.map((p) => ({ cluster: p.cluster, request_id: p.request_id })),
        ...pairs.map((p) => ({ cluster: p.cluster, request_id: p.victim_request_id })),
      ]);
      const across = pairs.filter((p) => shards.get(`${p.cluster}/${p.request_id}`) !== shards.get(`${p.cluster}/${p.victim_request_id}`));
      t.diagnostic(`${pairs.length} victim pages, ${across.length} of them owned by a lifecycle on the writer's other shard`);
      assert.ok(across.length > 0, 'a victim on the other shard than its writer');
    } finally {
      await api.close();
    }
  }
});
