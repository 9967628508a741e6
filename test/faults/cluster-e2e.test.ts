/**
 * The whole path on a 2-shard x 2-replica ClickHouse (test/support/clickhouse-cluster.ts), as a site that outgrew one
 * machine runs it: the schema created by `holdscope migrate` node by node, two `holdscope collector` processes taking
 * the engines' OTLP, librdkafka's mock Kafka between, and two `holdscope pipeline` processes in one consumer group,
 * each writing through the Distributed tables of a node of its own shard.
 *
 * Every scenario of the simulator goes through it, half to each collector, and one replica (shard 2's second) is
 * SIGKILLed after the first half and restarted some seconds later, while spans keep coming: a sync INSERT fails while a
 * replica is down, so the pipelines hold their batches uncommitted and retry. At the end every span is stored once
 * (distinct), every lifecycle record and every flag equals the truth (late-write victims on the other shard than
 * their writer included), both replicas of each shard hold the same rows, and the group committed every partition.
 * Then the PR 35049 trace goes through the same processes and its victim is named.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClickHouseClient } from '@clickhouse/client';
import { startHttpServer } from '../../dashboards/index.ts';
import { SCENARIO_NAMES, type LifecycleTruth } from '../../emitter/index.ts';
import type { Flag } from '../../queries/index.ts';
import { startClickHouseCluster, type ClickHouseCluster } from '../support/clickhouse-cluster.ts';
import { clickhouseClient } from '../support/clickhouse-server.ts';
import { assertReplicasAgree, checkDespiteAborts, shardOf, watchNodes, type NodeWatchdog } from '../support/cluster-checks.ts';
import { spawnCollector, type CollectorProcess } from '../support/collector-process.ts';
import { assertLateWriteVictimsEqualTruth, assertLifecycleFlagsEqualTruth } from '../support/flag-truth.ts';
import { randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { describeProcess, killLivePipelines, spawnPipeline, type PipelineProcess } from '../support/pipeline-process.ts';
import { assertPr35049LateWrite, PR35049_SPANS, sendPr35049Trace } from '../support/pr35049-trace.ts';
import { quietLog, randomDatabase, waitForSpans } from '../support/stack.ts';
import {
  add,
  assertMockKeptEveryMessage,
  assertStoredEqualsTruth,
  distinctSpans,
  nothingProduced,
  simulate,
  stopwatch,
  waitFor,
  waitForGroupCaughtUp,
  type Produced,
} from '../support/truth-check.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PARTITIONS = 6;
/**
 * Lifecycles per scenario: about 20k spans in all, well under the mock's 5 MB a partition. mixed holds every kind, and
 * late-write-bug enough late writes (a dozen victims) that some victim is on the other shard than its writer.
 */
const REQUESTS: Record<string, number> = { mixed: 300, 'late-write-bug': 400 };
const DEFAULT_REQUESTS = 120;
/** How long the killed replica stays down while spans keep coming. */
const OUTAGE_MS = 8000;
/** Lifecycles also compared through the read API (one HTTP request per request id): the late writers and a spread. */
const READ_API_SAMPLE = 40;

/** `holdscope migrate` with `args`; rejects with its output when it fails. */
async function runMigrate(args: string[]): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, HOLDSCOPE_LOG_LEVEL: 'warn' };
  delete env.NODE_TEST_CONTEXT; // the child is no test file
  const { stdout } = await promisify(execFile)(process.execPath, ['bin/holdscope.js', 'migrate', ...args], {
    cwd: PROJECT_ROOT,
    env,
    timeout: 120_000,
  });
  return stdout;
}

/** Every flag the read API on `client` reports over the window, uncapped. */
async function flagsFrom(client: ClickHouseClient, database: string, fromMs: number): Promise<Flag[]> {
  const api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
  try {
    const window = `from=${encodeURIComponent(new Date(fromMs).toISOString())}&to=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`;
    const res = await fetch(`http://127.0.0.1:${api.port}/api/flags?${window}&limit_per_kind=99999`);
    assert.equal(res.status, 200, await res.clone().text());
    return ((await res.json()) as { flags: Flag[] }).flags;
  } finally {
    await api.close();
  }
}

test(
  'two collectors and two pipelines on a 2x2 cluster, a replica killed mid-run: every lifecycle and flag equals the truth',
  { timeout: 300_000 },
  async (t) => {
    const step = stopwatch(t);
    const cleanups: (() => Promise<unknown>)[] = [];
    let mock: KafkaMock | undefined;
    let cluster: ClickHouseCluster | undefined;
    let watchdog: NodeWatchdog | undefined;
    const clients = new Map<string, ClickHouseClient>();
    const client = (shard: number, replica: number): ClickHouseClient => {
      const key = `${shard}/${replica}`;
      if (!clients.has(key)) clients.set(key, clickhouseClient(cluster!.node(shard, replica).url));
      return clients.get(key)!;
    };
    const pipelines: PipelineProcess[] = [];
    const collectors: CollectorProcess[] = [];
    const context = () =>
      [
        ...pipelines.map(describeProcess),
        ...collectors.map((c) => c.describe()),
        `nodes restarted: ${watchdog?.restarts.join('; ') || 'none'}`,
      ].join('\n');
    try {
      [mock, cluster] = await Promise.all([startKafkaMock({ brokers: 3 }), startClickHouseCluster({ shards: 2, replicas: 2 })]);
      watchdog = watchNodes(cluster);
      const retried: string[] = [];
      const check = <T>(what: string, body: () => Promise<T>) => checkDespiteAborts(cluster!, watchdog!, what, body, retried);
      const topic = randomTopic('cluster-e2e');
      const groupId = `g-${topic}`;
      const database = randomDatabase('cluster_e2e');
      await mock.createTopic(topic, PARTITIONS);
      await mock.createTopic(`${topic}-dlq`, 1);
      const storage = [
        '--database',
        database,
        '--clickhouse-cluster',
        cluster.name,
        '--clickhouse-cluster-ddl',
        'node-by-node',
        '--clickhouse-nodes',
        cluster.nodes.map((n) => n.url).join(','),
      ];
      t.diagnostic(`migrate: ${(await runMigrate(['--clickhouse-url', cluster.node(1, 1).url, ...storage])).trim()}`);
      step('schema created on 4 nodes');

      const kafka = ['--kafka-brokers', mock.brokers.join(',')];
      collectors.push(
        ...(await Promise.all([1, 2].map(() => spawnCollector([...kafka, '--topic', topic, '--dead-letter-topic', `${topic}-dlq`])))),
      );
      cleanups.push(() => Promise.all(collectors.map((c) => c.stop())));
      // Each pipeline writes through a node of its own shard: a Distributed INSERT goes to both shards anyway.
      pipelines.push(
        ...(await Promise.all(
          [1, 2].map((shard) =>
            spawnPipeline(`shard-${shard}`, [
              ...kafka,
              '--topics',
              topic,
              '--group-id',
              groupId,
              '--clickhouse-url',
              cluster!.node(shard, 1).url,
              ...storage,
              '--linger-ms',
              '50',
            ]),
          ),
        )),
      );
      cleanups.push(() => Promise.all(pipelines.map((p) => p.stop())));
      step('2 collectors and 2 pipelines ready');

      const produced: Produced = nothingProduced();
      let seed = 300;
      /** Scenarios sent two at a time, one to each collector at once, as engines of one site would. */
      const send = async (names: readonly string[]) => {
        for (let i = 0; i < names.length; i += 2) {
          const pair = names.slice(i, i + 2);
          const runs = await Promise.all(
            pair.map((name, j) => {
              const requests = REQUESTS[name] ?? DEFAULT_REQUESTS;
              const s = seed++;
              // A cluster of engines per scenario: two simulations at once both naming decode-0 of one cluster would
              // be one engine handing out each page twice, and its late writes would hit the other's lifecycles.
              return simulate(collectors[j]!.url, name as (typeof SCENARIO_NAMES)[number], s, requests, `cl-${name}-${s}`, (c) => {
                c.cluster = `site-${name}`;
              });
            }),
          );
          for (const run of runs) add(produced, run);
        }
      };
      const half = Math.ceil(SCENARIO_NAMES.length / 2);
      await send(SCENARIO_NAMES.slice(0, half));
      step(`${produced.spans} spans sent (${SCENARIO_NAMES.slice(0, half).join(', ')})`);
      const reader = client(1, 2);
      await check('first rows', () =>
        waitFor('first rows on the cluster', async () => (await distinctSpans(reader, database)) > 0, 60_000),
      );

      const victim = cluster.node(2, 2);
      const failuresBefore = await insertFailures(pipelines);
      const storedBefore = await check('stored before', () => distinctSpans(reader, database));
      // Held down only from its kill: a victim that aborted by itself before it (chdb does, see watchNodes) is restarted
      // by the watchdog like any node, where held down it stayed dead and failed the check above after 60 s.
      watchdog.holdDown(victim);
      await victim.kill();
      const downAt = Date.now();
      // No read of the test's own while the replica is down: one that had picked it fails, as a page's would.
      step(`${victim.label} SIGKILLed; ${storedBefore} of ${produced.spans} spans were stored just before`);
      await send(SCENARIO_NAMES.slice(half));
      step(`${produced.spans} spans sent in all`);
      await sleep(Math.max(0, OUTAGE_MS - (Date.now() - downAt)));
      await waitFor(
        'an INSERT failed while the replica was down',
        async () => (await insertFailures(pipelines)) > failuresBefore,
        30_000,
        context,
      );
      const failed = (await insertFailures(pipelines)) - failuresBefore;
      await victim.restart();
      watchdog.release(victim);
      step(`${victim.label} restarted after ${((Date.now() - downAt) / 1000).toFixed(1)} s; ${failed} INSERTs failed meanwhile`);

      await check('spans stored', () => waitForSpans(reader, database, produced.spans, 120_000));
      await waitForGroupCaughtUp(mock, groupId, topic, 60_000);
      await assertMockKeptEveryMessage(mock, topic);
      step('every span stored, the group committed to the end');
      const inserted = await Promise.all(pipelines.map(async (p) => (await p.metrics()).holdscope_pipeline_rows_inserted_total ?? 0));
      const replayed = inserted.reduce((a, b) => a + b, 0) - produced.spans;
      t.diagnostic(`rows inserted per pipeline: ${inserted.join(', ')}; ${produced.spans} spans emitted, ${replayed} rows inserted again`);
      assert.ok(
        inserted.every((n) => n > 0),
        'both pipelines of the group consumed',
      );

      await check('replicas', () => assertReplicasAgree(client, database, 'after the replica came back'));
      await check('records', () => assertStoredEqualsTruth(t, cluster!.node(2, 2), database, produced, READ_API_SAMPLE));
      const flags = await check('flags', () =>
        flagsFrom(client(2, 1), database, Math.min(...produced.holds.map((h) => h.startMs)) - 120_000),
      );
      const raised = assertLifecycleFlagsEqualTruth(flags, produced.truth, 'on the cluster:');
      const victims = assertLateWriteVictimsEqualTruth(flags, produced.truth);
      const across = await check('victims', () => crossShardVictims(reader, produced.truth));
      t.diagnostic(
        `${raised} lifecycle flags and ${victims} late-write victims equal the truth; ${across} victims on the writer's other shard`,
      );
      assert.ok(across > 0, 'a late write whose victim is a lifecycle of the other shard');
      step('records, flags and replicas compared with the truth');

      const startMs = Date.now() - 3_600_000;
      await sendPr35049Trace(collectors[1]!.url, 'pr35049', startMs);
      await check('trace stored', () => waitForSpans(reader, database, produced.spans + PR35049_SPANS, 60_000));
      let trace: Flag[] = [];
      await check('trace flagged', () =>
        waitFor(
          'the PR 35049 late write flagged with its victim',
          async () => {
            trace = await flagsFrom(reader, database, startMs - 60_000);
            // Named once B's record is stored too: A and B may be on partitions of different pipelines, and the
            // victim is read from B's allocation, which the other pipeline's refresh round may store a moment later.
            return trace.some(
              (f) =>
                f.kind === 'late_write' &&
                f.request_id === 'pr35049-A' &&
                Array.isArray(f.evidence.victims) &&
                f.evidence.victims.length > 0,
            );
          },
          30_000,
        ),
      );
      assertPr35049LateWrite(trace, 'pr35049');
      step('the PR 35049 trace: its victim named');
      assert.ok(
        pipelines.every((p) => p.alive()),
        context(),
      );
      if (watchdog.restarts.length > 0)
        t.diagnostic(`chdb nodes that aborted by themselves and were restarted: ${watchdog.restarts.join('; ')}`);
      if (retried.length > 0) t.diagnostic(`checks asked again after a node abort: ${retried.join('; ')}`);
    } catch (error) {
      // Which process or node was down, and how each ended: a bare 503 or ECONNRESET says neither.
      throw new Error(`${(error as Error).message}\n${context()}`, { cause: error });
    } finally {
      watchdog?.stop();
      for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
      killLivePipelines();
      await Promise.all([...clients.values()].map((c) => c.close()));
      await cluster?.stop();
      await mock?.stop();
    }
  },
);

/** INSERTs the pipelines counted as failed so far. */
async function insertFailures(pipelines: readonly PipelineProcess[]): Promise<number> {
  const counts = await Promise.all(pipelines.map(async (p) => (await p.metrics()).holdscope_pipeline_insert_failures_total ?? 0));
  return counts.reduce((a, b) => a + b, 0);
}

/** Late-write victims (true ones) whose lifecycle hashes to the other shard than their writer's. */
async function crossShardVictims(client: ClickHouseClient, truth: readonly LifecycleTruth[]): Promise<number> {
  const pairs = truth.flatMap((l) =>
    l.late_writes.flatMap((w) => w.victims.map((v) => ({ cluster: l.cluster, writer: l.request_id, victim: v.request_id }))),
  );
  const shards = await shardOf(client, [
    ...pairs.map((p) => ({ cluster: p.cluster, request_id: p.writer })),
    ...pairs.map((p) => ({ cluster: p.cluster, request_id: p.victim })),
  ]);
  return pairs.filter((p) => shards.get(`${p.cluster}/${p.writer}`) !== shards.get(`${p.cluster}/${p.victim}`)).length;
}
