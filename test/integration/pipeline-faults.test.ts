/**
 * The pipeline under faults, against the real components: librdkafka's mock Kafka cluster, a ClickHouse HTTP
 * server (chdb) in its own process, and `holdscope pipeline` itself as separate OS processes
 * (`node bin/holdscope.js pipeline ...`), so that either side can be SIGKILLed mid-stream.
 *
 * Every test compares what the read API reports with the simulator's ground truth, lifecycle by lifecycle, and
 * checks that no span is missing or counted twice and that the consumer group committed every partition to its
 * end. Pipelines log at warn to a captured stderr that failure messages quote.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { after, afterEach, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { buildScenario, runSimulation, type LifecycleTruth, type ScenarioName } from '../../emitter/index.ts';
import { migrate } from '../../pipeline/index.ts';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from '../support/clickhouse-server.ts';
import { kafkaForTests, KAFKA_TEST_HEARTBEAT_INTERVAL_MS, KAFKA_TEST_SESSION_TIMEOUT_MS, randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { actualRecord, assertReadApiMatchesTruth, expectedRecord, quietLog, randomDatabase, waitForSpans } from '../support/stack.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STDERR_KEEP_CHARS = 32_768;

// ---------------------------------------------------------------------------------------------------------
// `holdscope pipeline` as a child process

interface PipelineProcess {
  readonly name: string;
  readonly pid: number;
  readonly metricsPort: number;
  alive(): boolean;
  /** The last 32 KiB of its stderr (pino JSON lines at warn and above). */
  stderr(): string;
  /** Counter and gauge values from its /metrics, labels summed. */
  metrics(): Promise<Record<string, number>>;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, and how the process ended if it did within `ms` (`exit code 0`, `signal SIGKILL`, ...). */
  terminate(ms: number): Promise<string | undefined>;
  /** SIGTERM (a clean shutdown), SIGKILL after 10 s, and wait for the exit. Idempotent. */
  stop(): Promise<void>;
}

// Pipelines still running, killed when this process exits so a forgotten stop() leaves no orphan; and should this
// process be killed outright, each pipeline exits at the EOF of its stdin (the guard below), as the Kafka mock
// and the ClickHouse server do.
const liveChildren = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of liveChildren) child.kill('SIGKILL');
});
const EXIT_WITH_STDIN = `data:text/javascript,${encodeURIComponent(
  'process.stdin.on("end", () => process.exit(70)).on("error", () => process.exit(70)).resume().unref();',
)}`;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

async function scrape(port: number): Promise<Record<string, number>> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200);
  const values: Record<string, number> = {};
  for (const line of (await res.text()).split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (match) values[match[1] as string] = (values[match[1] as string] ?? 0) + Number(match[2]);
  }
  return values;
}

/**
 * Spawns `node bin/holdscope.js pipeline ARGS` and resolves once its /healthz answers, which `holdscope pipeline`
 * serves only once ClickHouse was reached (the schema migrated) and the consumer started.
 */
async function spawnPipeline(name: string, args: string[], env: Record<string, string> = {}): Promise<PipelineProcess> {
  const metricsPort = await freePort();
  const childEnv: NodeJS.ProcessEnv = { ...process.env, HOLDSCOPE_LOG_LEVEL: 'warn', ...env };
  delete childEnv.NODE_TEST_CONTEXT; // the child is no test file
  const child = spawn(
    process.execPath,
    [
      '--import',
      EXIT_WITH_STDIN,
      'bin/holdscope.js',
      'pipeline',
      ...args,
      '--metrics-port',
      String(metricsPort),
      '--session-timeout-ms',
      String(KAFKA_TEST_SESSION_TIMEOUT_MS),
      '--heartbeat-interval-ms',
      String(KAFKA_TEST_HEARTBEAT_INTERVAL_MS),
    ],
    { cwd: PROJECT_ROOT, env: childEnv, stdio: ['pipe', 'ignore', 'pipe'] },
  );
  liveChildren.add(child);
  child.stdin?.on('error', () => {}); // EPIPE after the child died: reported through 'exit' instead
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP_CHARS);
  });
  let exitText: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      liveChildren.delete(child);
      exitText = signal ? `signal ${signal}` : `exit code ${code}`;
      resolve();
    });
  });
  const explain = (): string => `pipeline ${name} (pid ${child.pid}${exitText ? `, ended by ${exitText}` : ''}); stderr:\n${stderr.trim() || '(empty)'}`;
  // An unref'd timer: a process that ended at once must not hold this one for the rest of the wait.
  const waitExit = (ms: number): Promise<boolean> =>
    Promise.race([exited.then(() => true), sleep(ms, undefined, { ref: false }).then(() => false)]);

  const proc: PipelineProcess = {
    name,
    pid: child.pid ?? -1,
    metricsPort,
    alive: () => exitText === undefined,
    stderr: () => stderr,
    metrics: async () => {
      try {
        return await scrape(metricsPort);
      } catch (error) {
        throw new Error(`scraping ${explain()}`, { cause: error });
      }
    },
    kill: async () => {
      if (exitText === undefined) child.kill('SIGKILL');
      await exited;
    },
    terminate: async (ms) => {
      if (exitText === undefined) child.kill('SIGTERM');
      await waitExit(ms);
      return exitText;
    },
    stop: async () => {
      if (exitText !== undefined) return;
      child.kill('SIGTERM');
      if (!(await waitExit(10_000))) child.kill('SIGKILL');
      await exited;
    },
  };

  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exitText !== undefined) throw new Error(`${explain()}\nexited before it was ready`);
    if (Date.now() > deadline) {
      await proc.kill();
      throw new Error(`${explain()}\nnot ready within 60 s`);
    }
    const ok = await fetch(`http://127.0.0.1:${metricsPort}/healthz`, { signal: AbortSignal.timeout(1000) }).then(
      (res) => res.status === 200,
      () => false,
    );
    if (ok) return proc;
    await sleep(200);
  }
}

const describeProcess = (p: PipelineProcess): string =>
  `pipeline ${p.name} (pid ${p.pid}, ${p.alive() ? 'running' : 'ended'}); stderr:\n${p.stderr().trim() || '(empty)'}`;

// ---------------------------------------------------------------------------------------------------------
// The rest of the stack

/** Runs the simulator into the collector as fast as it accepts; every span must reach Kafka. */
async function simulate(endpoint: string, scenario: ScenarioName, seed: number, requests: number, idPrefix: string) {
  const { config } = buildScenario(scenario, seed);
  config.requests = requests;
  config.idPrefix = idPrefix;
  const summary = await runSimulation({ config, endpoint, startTimeMs: Date.now() - 3_600_000, pace: 'fast' });
  assert.equal(summary.spansFailed, 0, `${scenario}: spans the collector did not accept`);
  assert.equal(summary.spansExported, summary.spansEmitted);
  return summary;
}

interface Produced {
  spans: number;
  truth: LifecycleTruth[];
}

function add(total: Produced, summary: { spansEmitted: number; truth: LifecycleTruth[] }): void {
  total.spans += summary.spansEmitted;
  total.truth.push(...summary.truth);
}

async function startCollector(mock: KafkaMock, topic: string): Promise<{ url: string; collector: Collector }> {
  const collector = new Collector(
    collectorConfigSchema.parse({ port: 0, host: '127.0.0.1', kafkaBrokers: mock.brokers.join(','), topic, deadLetterTopic: `${topic}-dlq` }),
    { log: quietLog },
  );
  const port = await collector.start();
  return { url: `http://127.0.0.1:${port}`, collector };
}

async function queryNumber(client: ClickHouseClient, query: string): Promise<number> {
  const result = await client.query({ query, format: 'JSONEachRow' });
  return Number(((await result.json()) as { n: number }[])[0]?.n ?? NaN);
}

/**
 * Every lifecycle record in the `lifecycles` view (the rows the read API serves, read with the read API's own
 * settings, in one query rather than one HTTP request per request id) equals the truth's.
 */
async function assertAllRecordsMatchTruth(client: ClickHouseClient, database: string, truth: LifecycleTruth[]): Promise<void> {
  const result = await client.query({
    query: `SELECT * FROM ${database}.lifecycles`,
    format: 'JSONEachRow',
    clickhouse_settings: { date_time_output_format: 'iso', output_format_json_quote_64bit_integers: 0 },
  });
  const rows = (await result.json()) as Record<string, unknown>[];
  const key = (requestId: unknown, generation: unknown) => `${String(requestId)}#${String(generation)}`;
  const stored = new Map(rows.map((r) => [key(r.request_id, r.generation), r]));
  assert.equal(stored.size, rows.length, 'one record per (request id, generation)');
  const missing: string[] = [];
  const wrong: { key: string; actual: ReturnType<typeof actualRecord>; expected: ReturnType<typeof expectedRecord> }[] = [];
  for (const t of truth) {
    const row = stored.get(key(t.request_id, t.generation));
    if (!row) {
      missing.push(key(t.request_id, t.generation));
      continue;
    }
    const actual = actualRecord(row);
    const expected = expectedRecord(t);
    if (!isDeepStrictEqual(actual, expected)) wrong.push({ key: key(t.request_id, t.generation), actual, expected });
  }
  assert.deepEqual(missing, [], `${missing.length} of ${truth.length} lifecycles have no record`);
  if (wrong.length > 0) {
    const first = wrong[0] as (typeof wrong)[number];
    assert.deepEqual(first.actual, first.expected, `${wrong.length} of ${truth.length} records differ from the truth; the first: ${first.key}`);
  }
}

/**
 * No span missing, none twice, one lifecycle record per true lifecycle, each equal to the truth; and the read
 * API (over its own client of the server) serves them: for every lifecycle, or for a sample when there are many
 * (one HTTP request per request id costs about 0.1 s of the server's time on 2 cores).
 */
async function assertStoredEqualsTruth(t: TestContext, server: ClickHouseServer, database: string, produced: Produced, readApi: 'all' | number): Promise<void> {
  const client = clickhouseClient(server.url);
  const api = await startHttpServer({ port: 0, host: '127.0.0.1', client: clickhouseClient(server.url), database, log: quietLog });
  try {
    const distinct = await queryNumber(client, `SELECT count() AS n FROM (SELECT DISTINCT trace_id, span_id FROM ${database}.spans)`);
    const raw = await queryNumber(client, `SELECT count() AS n FROM ${database}.spans`);
    const lifecycles = await queryNumber(client, `SELECT count() AS n FROM ${database}.lifecycles`);
    t.diagnostic(`${produced.spans} spans emitted; ${distinct} distinct stored (${raw} rows in the table); ${lifecycles} lifecycles, truth ${produced.truth.length}`);
    assert.equal(distinct, produced.spans, 'distinct spans stored = spans emitted');
    assert.equal(lifecycles, produced.truth.length, 'lifecycle records = true lifecycles');
    await assertAllRecordsMatchTruth(client, database, produced.truth);
    let checked = produced.truth;
    if (readApi !== 'all') {
      // Every request id with a late write (the bug the product exists for), then an even spread of the rest.
      const ids = [...new Set(produced.truth.map((l) => l.request_id))];
      const late = new Set(produced.truth.filter((l) => l.late_writes.length > 0).map((l) => l.request_id));
      const rest = ids.filter((id) => !late.has(id));
      const step = Math.max(1, Math.floor(rest.length / Math.max(1, readApi - late.size)));
      const sample = new Set([...late, ...rest.filter((_, i) => i % step === 0)].slice(0, Math.max(readApi, late.size)));
      checked = produced.truth.filter((l) => sample.has(l.request_id));
    }
    await assertReadApiMatchesTruth(`http://127.0.0.1:${api.port}`, checked);
  } finally {
    await api.close();
    await client.close();
  }
}

/** The partitions whose committed offset (for the group) is not their end, described. */
async function partitionsBehind(mock: KafkaMock, groupId: string, topic: string): Promise<string[]> {
  const admin = kafkaForTests(mock.brokers).admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(topic);
    const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const at = new Map((committed?.partitions ?? []).map((p) => [p.partition, p.offset]));
    return ends.filter((e) => at.get(e.partition) !== e.high).map((e) => `partition ${e.partition}: committed ${at.get(e.partition)}, end ${e.high}`);
  } finally {
    await admin.disconnect();
  }
}

/** Waits until the group's committed offset is the end of every partition of the topic. */
async function waitForGroupCaughtUp(mock: KafkaMock, groupId: string, topic: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let behind = await partitionsBehind(mock, groupId, topic);
  while (behind.length > 0) {
    if (Date.now() > deadline) assert.fail(`group ${groupId} did not commit every partition to its end:\n  ${behind.join('\n  ')}`);
    await sleep(250);
    behind = await partitionsBehind(mock, groupId, topic);
  }
}

/** Notes how far into the test a step came: the file must stay within a few minutes on 2 cores. */
function stopwatch(t: TestContext): (step: string) => void {
  const start = Date.now();
  return (step) => t.diagnostic(`${((Date.now() - start) / 1000).toFixed(1)} s: ${step}`);
}

async function waitFor(what: string, condition: () => Promise<boolean>, timeoutMs: number, context: () => string = () => ''): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail(`${what}: not within ${timeoutMs} ms\n${context()}`);
    await sleep(100);
  }
}

// ---------------------------------------------------------------------------------------------------------

describe('pipeline faults: collector → Kafka → `holdscope pipeline` processes → ClickHouse HTTP server → read API', () => {
  let mock: KafkaMock;
  // Everything a test started, stopped in reverse order after it (passed or not).
  let cleanups: (() => Promise<unknown>)[] = [];
  const cleanup = <T>(resource: T, stop: (r: T) => Promise<unknown>): T => {
    cleanups.push(() => stop(resource));
    return resource;
  };

  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
  });
  afterEach(async () => {
    for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
    cleanups = [];
  });
  after(async () => {
    for (const child of liveChildren) child.kill('SIGKILL');
    await mock?.stop();
  });

  it('end to end on the ClickHouse HTTP server equals the ground truth for every lifecycle', { timeout: 120_000 }, async (t) => {
    const step = stopwatch(t);
    const server = cleanup(await startClickHouseServer(), (s) => s.stop());
    const client = cleanup(clickhouseClient(server.url), (c) => c.close());
    const topic = randomTopic('faults-e2e');
    const database = randomDatabase('faults_e2e');
    await mock.createTopic(topic, 6);
    const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());

    // Kafka and ClickHouse from the environment, the rest from flags; the pipeline creates the schema itself.
    const pipeline = cleanup(
      await spawnPipeline('e2e', ['--topics', topic, '--group-id', `g-${topic}`, '--database', database, '--linger-ms', '50'], {
        KAFKA_BROKERS: mock.brokers.join(','),
        CLICKHOUSE_URL: server.url,
      }),
      (p) => p.stop(),
    );

    step('pipeline ready');
    const produced: Produced = { spans: 0, truth: [] };
    add(produced, await simulate(url, 'mixed', 11, 200, 'e2e-mixed'));
    add(produced, await simulate(url, 'late-write-bug', 12, 60, 'e2e-late'));
    assert.ok(produced.truth.some((l) => l.late_writes.length > 0), 'the truth has late writes');
    assert.ok(produced.truth.some((l) => l.resolution === 'open') && produced.truth.some((l) => l.resolution === 'timeout'));

    step(`${produced.spans} spans produced`);
    await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) => assert.fail(`${error.message}\n${describeProcess(pipeline)}`));
    await waitForGroupCaughtUp(mock, `g-${topic}`, topic);
    step('all spans stored and committed');
    const metrics = await pipeline.metrics();
    assert.ok((metrics.holdscope_pipeline_rows_inserted_total ?? 0) >= produced.spans, 'the process reports the rows it inserted');
    await assertStoredEqualsTruth(t, server, database, produced, 'all');
    step('compared with the truth');
    assert.ok(pipeline.alive(), describeProcess(pipeline));
  });

  it('survives ClickHouse killed for 20 s and the pipeline SIGKILLed mid-batch: nothing lost, nothing counted twice', { timeout: 150_000 }, async (t) => {
    const step = stopwatch(t);
    const server = cleanup(await startClickHouseServer(), (s) => s.stop());
    const client = cleanup(clickhouseClient(server.url), (c) => c.close());
    const topic = randomTopic('faults-outage');
    const groupId = `g-${topic}`;
    const database = randomDatabase('faults_outage');
    await mock.createTopic(topic, 6);
    await migrate(client, { database, retentionDays: 30 });
    const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());
    const args = ['--kafka-brokers', mock.brokers.join(','), '--topics', topic, '--group-id', groupId, '--clickhouse-url', server.url, '--database', database];
    // Small INSERTs, few partitions at once: many INSERT/commit steps for the faults to land between.
    const tuning = ['--linger-ms', '20', '--max-batch-rows', '500', '--partitions-consumed-concurrently', '2'];

    // The first part of the stream is in Kafka before the pipeline starts.
    const produced: Produced = { spans: 0, truth: [] };
    add(produced, await simulate(url, 'mixed', 21, 300, 'outage-a'));
    add(produced, await simulate(url, 'late-write-bug', 22, 100, 'outage-late'));

    step(`${produced.spans} spans in Kafka`);
    const first = cleanup(await spawnPipeline('first', [...args, ...tuning]), (p) => p.stop());
    const spansIn = () => queryNumber(client, `SELECT count() AS n FROM (SELECT DISTINCT trace_id, span_id FROM ${database}.spans)`);
    await waitFor('first rows in ClickHouse', async () => (await spansIn()) > 0, 30_000, () => describeProcess(first));

    const atKill = await spansIn();
    await server.kill();
    t.diagnostic(`ClickHouse SIGKILLed with ${atKill} of ${produced.spans} spans stored`);
    // More of the stream arrives while ClickHouse is down: the pipeline fetches it and must hold it, retrying.
    const outageStart = Date.now();
    add(produced, await simulate(url, 'mixed', 23, 300, 'outage-b'));
    await sleep(Math.max(0, 20_000 - (Date.now() - outageStart)));

    assert.ok(first.alive(), `the pipeline kept retrying through the outage rather than exiting\n${describeProcess(first)}`);
    const during = await first.metrics();
    t.diagnostic(`after 20 s without ClickHouse: ${during.holdscope_pipeline_insert_failures_total} failed INSERTs, ${during.holdscope_pipeline_rows_pending} rows pending`);
    assert.ok((during.holdscope_pipeline_insert_failures_total ?? 0) > 0, 'INSERTs failed and were retried');
    assert.ok((during.holdscope_pipeline_rows_pending ?? 0) > 0, 'the pipeline holds uncommitted rows: it dies mid-batch');

    const firstInserted = during.holdscope_pipeline_rows_inserted_total ?? 0;
    await first.kill();
    step('pipeline SIGKILLed while ClickHouse was down');
    await server.restart();
    const second = cleanup(await spawnPipeline('second', [...args, ...tuning]), (p) => p.stop());
    step('ClickHouse and the pipeline restarted');
    await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) => assert.fail(`${error.message}\n${describeProcess(second)}`));
    await waitForGroupCaughtUp(mock, groupId, topic);
    step('caught up');

    // The other mid-batch moment: rows ClickHouse has acknowledged whose offsets are not committed yet. Hold a
    // batch in the pipeline (ClickHouse down again), make Kafka unreachable so no commit can follow, let the
    // INSERT through, and SIGKILL the pipeline then: its successor must read those spans again and insert them
    // a second time, which must change nothing.
    await server.kill();
    add(produced, await simulate(url, 'mixed', 24, 150, 'outage-c'));
    await waitFor('the second pipeline holds the new spans', async () => ((await second.metrics()).holdscope_pipeline_rows_pending ?? 0) > 0, 30_000, () => describeProcess(second));
    const secondBefore = (await second.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;
    cleanup(mock, (m) => m.allUp()); // whatever happens below, the next test gets its brokers back
    await mock.allDown();
    await server.restart();
    let secondInserted = 0;
    await waitFor(
      'ClickHouse acknowledges the held rows',
      async () => {
        const m = await second.metrics();
        secondInserted = m.holdscope_pipeline_rows_inserted_total ?? 0;
        return (m.holdscope_pipeline_rows_pending ?? 0) === 0 && secondInserted > secondBefore;
      },
      30_000,
      () => describeProcess(second),
    );
    assert.ok(second.alive(), describeProcess(second));
    await second.kill();
    await mock.allUp();
    step(`pipeline SIGKILLed after ${secondInserted - secondBefore} rows were acknowledged and before their offsets could be committed`);
    const third = cleanup(await spawnPipeline('third', [...args, ...tuning]), (p) => p.stop());

    await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) => assert.fail(`${error.message}\n${describeProcess(third)}`));
    await waitForGroupCaughtUp(mock, groupId, topic);
    step('all spans stored and committed');
    const thirdInserted = (await third.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;
    const inserted = firstInserted + secondInserted + thirdInserted;
    t.diagnostic(`span rows inserted by the three processes: ${firstInserted} + ${secondInserted} + ${thirdInserted} = ${inserted}, for ${produced.spans} spans`);
    assert.ok(inserted > produced.spans, 'some spans were inserted twice (replayed after the SIGKILL)');
    await assertStoredEqualsTruth(t, server, database, produced, 60);
    step('compared with the truth');
    assert.ok(third.alive(), describeProcess(third));

    // A clean stop (SIGTERM, as on a deploy) while ClickHouse is down and a batch waits for it: the process must
    // end promptly rather than retry forever, and commit nothing it could not store.
    await server.kill();
    await simulate(url, 'mixed', 25, 50, 'outage-d');
    await waitFor('the third pipeline holds spans', async () => ((await third.metrics()).holdscope_pipeline_rows_pending ?? 0) > 0, 30_000, () => describeProcess(third));
    const stopStart = Date.now();
    const ended = await third.terminate(15_000);
    assert.equal(ended, 'exit code 0', `SIGTERM during an outage ends the pipeline within 15 s\n${describeProcess(third)}`);
    step(`SIGTERM during the outage ended the pipeline in ${Date.now() - stopStart} ms`);
    assert.notDeepEqual(await partitionsBehind(mock, groupId, topic), [], 'the spans ClickHouse never got are not committed');
  });

  it('two processes in one group split the partitions; after one is SIGKILLed the other takes over and loses nothing', { timeout: 150_000 }, async (t) => {
    const step = stopwatch(t);
    const server = cleanup(await startClickHouseServer(), (s) => s.stop());
    const client = cleanup(clickhouseClient(server.url), (c) => c.close());
    const topic = randomTopic('faults-group');
    const groupId = `g-${topic}`;
    const database = randomDatabase('faults_group');
    await mock.createTopic(topic, 6);
    await migrate(client, { database, retentionDays: 30 });
    const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());
    const args = ['--kafka-brokers', mock.brokers.join(','), '--topics', topic, '--group-id', groupId, '--clickhouse-url', server.url, '--database', database];
    const tuning = ['--linger-ms', '20', '--max-batch-rows', '2000', '--partitions-consumed-concurrently', '2'];

    const [a, b] = await Promise.all([spawnPipeline('a', [...args, ...tuning]), spawnPipeline('b', [...args, ...tuning])]);
    cleanup(a as PipelineProcess, (p) => p.stop());
    cleanup(b as PipelineProcess, (p) => p.stop());
    step('both members ready');
    const rowsOf = async (p: PipelineProcess) => (await p.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;

    // Produce round after round until both members have inserted rows: the group has split the partitions.
    const produced: Produced = { spans: 0, truth: [] };
    let round = 0;
    const produceRound = async () => {
      round++;
      add(produced, await simulate(url, round % 4 === 0 ? 'late-write-bug' : 'mixed', 300 + round, 150, `group-r${round}`));
    };
    const splitDeadline = Date.now() + 60_000;
    do {
      await produceRound();
      await sleep(500);
      if (Date.now() > splitDeadline) assert.fail(`the two members never both inserted rows\n${describeProcess(a)}\n${describeProcess(b)}`);
    } while ((await rowsOf(a)) === 0 || (await rowsOf(b)) === 0 || round < 4);
    const beforeKill = { a: await rowsOf(a), b: await rowsOf(b) };
    step(`before the kill: ${produced.spans} spans in ${round} rounds; a inserted ${beforeKill.a} rows, b ${beforeKill.b}`);
    assert.ok(beforeKill.a > 0 && beforeKill.b > 0, 'both members inserted rows');

    // SIGKILL b while spans are still flowing, then keep producing: b's partitions get data only a can read,
    // once the group notices b is gone (after the session timeout) and hands them over.
    const inFlight = produceRound();
    await sleep(300);
    const bAtKill = await b.metrics();
    await b.kill();
    await inFlight;
    step(`b SIGKILLed holding ${bAtKill.holdscope_pipeline_rows_pending ?? 0} rows not yet acknowledged, after inserting ${bAtKill.holdscope_pipeline_rows_inserted_total ?? 0}`);
    const spansAtKill = produced.spans;
    for (let i = 0; i < 4; i++) await produceRound();
    step(`${produced.spans - spansAtKill} spans produced after the kill`);

    await waitForSpans(client, database, produced.spans, 90_000).catch((error: Error) => assert.fail(`${error.message}\n${describeProcess(a)}`));
    await waitForGroupCaughtUp(mock, groupId, topic);
    step('all spans stored and committed');
    assert.ok(a.alive(), describeProcess(a));
    const survivorRows = (await rowsOf(a)) - beforeKill.a;
    t.diagnostic(`the survivor inserted ${survivorRows} rows after the kill; ${beforeKill.a + survivorRows + (bAtKill.holdscope_pipeline_rows_inserted_total ?? 0)} rows in all for ${produced.spans} spans`);
    assert.ok(survivorRows >= produced.spans - spansAtKill, 'the survivor inserted at least everything produced after the kill');
    await assertStoredEqualsTruth(t, server, database, produced, 60);
    step('compared with the truth');
  });
});
