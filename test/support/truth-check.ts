/**
 * Feeding the stack with simulated engines and checking what it stored against the simulator's ground truth,
 * for tests that run the pipeline against real Kafka (the mock cluster) and a real ClickHouse HTTP server:
 * - `simulate` sends a scenario through a collector and insists every span was accepted, so the count of spans
 *   emitted is what ClickHouse must end up holding;
 * - `assertStoredEqualsTruth` then checks no span is missing or stored twice, one lifecycle record per true
 *   lifecycle, each equal to the truth, and the read API serving them;
 * - `waitForGroupCaughtUp` checks the consumer group committed every partition to its end: without it, a test
 *   could pass while the pipeline would read part of the stream again at its next start.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import {
  buildScenario,
  runSimulation,
  type LifecycleTruth,
  type ScenarioName,
  type SimConfig,
  type SimulationSummary,
} from '../../emitter/index.ts';
import { clickhouseClient, type ClickHouseServer } from './clickhouse-server.ts';
import { kafkaForTests, type KafkaMock } from './kafka-mock.ts';
import { actualRecord, assertReadApiMatchesTruth, expectedRecord, quietLog } from './stack.ts';

/**
 * Runs the simulator into the collector as fast as it accepts; every span must reach Kafka. Simulated time
 * starts an hour ago, well inside the tables' retention. Rounds that must not collide need distinct `idPrefix`es:
 * trace ids derive from the request id.
 */
export async function simulate(
  endpoint: string,
  scenario: ScenarioName,
  seed: number,
  requests: number,
  idPrefix: string,
  adjust: (config: SimConfig) => void = () => undefined,
): Promise<SimulationSummary & { startTimeMs: number }> {
  const { config } = buildScenario(scenario, seed);
  config.requests = requests;
  config.idPrefix = idPrefix;
  adjust(config);
  const startTimeMs = Date.now() - 3_600_000;
  const summary = await runSimulation({ config, endpoint, startTimeMs, pace: 'fast' });
  assert.equal(summary.spansFailed, 0, `${scenario}: spans the collector did not accept`);
  assert.equal(summary.spansExported, summary.spansEmitted);
  return { ...summary, startTimeMs };
}

/** What a test sent: the spans ClickHouse must hold and the lifecycles it must report. */
export interface Produced {
  spans: number;
  truth: LifecycleTruth[];
  /** Each true hold's start (the truth's is from its simulation's start) and resolution. */
  holds: { startMs: number; resolution: string }[];
}

export const nothingProduced = (): Produced => ({ spans: 0, truth: [], holds: [] });

export function add(total: Produced, summary: { spansEmitted: number; truth: LifecycleTruth[]; startTimeMs: number }): void {
  total.spans += summary.spansEmitted;
  total.truth.push(...summary.truth);
  for (const t of summary.truth)
    if (t.hold_start_ms !== null) total.holds.push({ startMs: summary.startTimeMs + t.hold_start_ms, resolution: t.resolution });
}

/** An in-process collector on a free port producing to `topic` (rejects to `${topic}-dlq`). */
export async function startCollector(mock: KafkaMock, topic: string): Promise<{ url: string; collector: Collector }> {
  const collector = new Collector(
    collectorConfigSchema.parse({
      port: 0,
      host: '127.0.0.1',
      kafkaBrokers: mock.brokers.join(','),
      topic,
      deadLetterTopic: `${topic}-dlq`,
    }),
    { log: quietLog },
  );
  const port = await collector.start();
  return { url: `http://127.0.0.1:${port}`, collector };
}

/** The `n` column of a query's first row. */
export async function queryNumber(client: ClickHouseClient, query: string): Promise<number> {
  const result = await client.query({ query, format: 'JSONEachRow' });
  return Number(((await result.json()) as { n: number }[])[0]?.n ?? NaN);
}

/** Distinct spans in `database.spans`: the table may hold a replayed span twice until a merge removes one. */
export const distinctSpans = (client: ClickHouseClient, database: string): Promise<number> =>
  queryNumber(client, `SELECT count() AS n FROM (SELECT DISTINCT trace_id, span_id FROM ${database}.spans)`);

/**
 * Every lifecycle record in the `lifecycles` view (the rows the read API serves, read with the read API's own
 * settings, in one query rather than one HTTP request per request id) equals the truth's.
 */
export async function assertAllRecordsMatchTruth(client: ClickHouseClient, database: string, truth: LifecycleTruth[]): Promise<void> {
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
    assert.deepEqual(
      first.actual,
      first.expected,
      `${wrong.length} of ${truth.length} records differ from the truth; the first: ${first.key}`,
    );
  }
}

/**
 * The hold minutes (migration 0010), which the pipeline computes after each record refresh and before it commits:
 * holds per minute of start and resolution equal the truth's, so a pipeline killed between the records and the
 * minutes left none stale.
 */
export async function assertHoldMinutesMatchTruth(client: ClickHouseClient, database: string, holds: Produced['holds']): Promise<void> {
  const result = await client.query({
    query:
      `SELECT toUnixTimestamp(minute) * 1000 AS minute_ms, g.resolution AS resolution, sum(g.holds) AS holds FROM ${database}.hold_minutes FINAL ` +
      'ARRAY JOIN resolution_groups AS g GROUP BY minute_ms, resolution',
    format: 'JSONEachRow',
    clickhouse_settings: { output_format_json_quote_64bit_integers: 0 },
  });
  const stored = ((await result.json()) as { minute_ms: number; resolution: string; holds: number }[]).map(
    (r) => `${r.minute_ms} ${r.resolution} ${r.holds}`,
  );
  const expected = new Map<string, number>();
  for (const h of holds) {
    // In whole microseconds, as the spans carry them: a float sum could put a hold at a minute's edge in the other.
    const key = `${Math.floor(Math.round(h.startMs * 1000) / 60_000_000) * 60_000} ${h.resolution}`;
    expected.set(key, (expected.get(key) ?? 0) + 1);
  }
  assert.deepEqual(
    stored.sort(),
    [...expected].map(([key, count]) => `${key} ${count}`).sort(),
    'holds per minute and resolution in hold_minutes = the truth',
  );
}

/**
 * No span missing, none twice, one lifecycle record per true lifecycle, each equal to the truth; and the read
 * API (over its own client of the server) serves them: for every lifecycle, or for a sample when there are many
 * (one HTTP request per request id costs about 0.1 s of the server's time on 2 cores).
 */
export async function assertStoredEqualsTruth(
  t: TestContext,
  server: Pick<ClickHouseServer, 'url'>,
  database: string,
  produced: Produced,
  readApi: 'all' | number,
): Promise<void> {
  const client = clickhouseClient(server.url);
  const api = await startHttpServer({ port: 0, host: '127.0.0.1', client: clickhouseClient(server.url), database, log: quietLog });
  try {
    const distinct = await distinctSpans(client, database);
    const raw = await queryNumber(client, `SELECT count() AS n FROM ${database}.spans`);
    const lifecycles = await queryNumber(client, `SELECT count() AS n FROM ${database}.lifecycles`);
    t.diagnostic(
      `${produced.spans} spans emitted; ${distinct} distinct stored (${raw} rows in the table); ${lifecycles} lifecycles, truth ${produced.truth.length}`,
    );
    assert.equal(distinct, produced.spans, 'distinct spans stored = spans emitted');
    assert.equal(lifecycles, produced.truth.length, 'lifecycle records = true lifecycles');
    await assertAllRecordsMatchTruth(client, database, produced.truth);
    await assertHoldMinutesMatchTruth(client, database, produced.holds);
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
export async function partitionsBehind(mock: KafkaMock, groupId: string, topic: string): Promise<string[]> {
  const admin = kafkaForTests(mock.brokers).admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(topic);
    const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const at = new Map((committed?.partitions ?? []).map((p) => [p.partition, p.offset]));
    return ends
      .filter((e) => at.get(e.partition) !== e.high)
      .map((e) => `partition ${e.partition}: committed ${at.get(e.partition)}, end ${e.high}`);
  } finally {
    await admin.disconnect();
  }
}

/**
 * Fails if librdkafka's mock dropped the oldest messages of a partition: it keeps only about 5 MB per partition
 * and drops silently beyond that, which a test would otherwise report as spans holdscope lost.
 */
export async function assertMockKeptEveryMessage(mock: KafkaMock, topic: string): Promise<void> {
  const admin = kafkaForTests(mock.brokers).admin();
  await admin.connect();
  try {
    const dropped = (await admin.fetchTopicOffsets(topic)).filter((p) => Number(p.low) > 0);
    assert.deepEqual(
      dropped.map((p) => `partition ${p.partition}: first offset ${p.low} of ${p.high}`),
      [],
      'the Kafka mock dropped messages past its per-partition cap: the test produced too much, not a holdscope loss',
    );
  } finally {
    await admin.disconnect();
  }
}

/** Waits until the group's committed offset is the end of every partition of the topic. */
export async function waitForGroupCaughtUp(mock: KafkaMock, groupId: string, topic: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let behind = await partitionsBehind(mock, groupId, topic);
  while (behind.length > 0) {
    if (Date.now() > deadline) assert.fail(`group ${groupId} did not commit every partition to its end:\n  ${behind.join('\n  ')}`);
    await sleep(250);
    behind = await partitionsBehind(mock, groupId, topic);
  }
}

/** Notes how far into the test a step came: fault tests must stay within a few minutes on 2 cores. */
export function stopwatch(t: TestContext): (step: string) => void {
  const start = Date.now();
  return (step) => t.diagnostic(`${((Date.now() - start) / 1000).toFixed(1)} s: ${step}`);
}

/**
 * Polls `condition` every 100 ms until it holds; fails after `timeoutMs` with `context()` (say, a process's
 * stderr). Tests wait this way rather than sleep a fixed time: a shared 2-core machine is slow by moments.
 */
export async function waitFor(
  what: string,
  condition: () => Promise<boolean>,
  timeoutMs: number,
  context: () => string = () => '',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail(`${what}: not within ${timeoutMs} ms\n${context()}`);
    await sleep(100);
  }
}
