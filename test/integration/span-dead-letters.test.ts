/**
 * Rows ClickHouse refuses for their content never block the others, and nothing else is dropped: against embedded
 * ClickHouse (chdb), a ClickHouse HTTP server in its own process that is killed and restarted, and librdkafka's mock
 * Kafka cluster. No fakes: the refusals are ClickHouse's own (a timestamp past DateTime64(9)'s range written as TSV,
 * bypassing the validator; a table constraint), the outages a killed server.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { createPipelineMetrics, encodeRows, migrate, SpanWriter, type PipelineMetrics, type SpanRow } from '../../pipeline/index.ts';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from '../support/clickhouse-server.ts';
import { startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { quietLog, randomDatabase, startStack, waitForSpans } from '../support/stack.ts';
import { simulate, waitFor, waitForGroupCaughtUp } from '../support/truth-check.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const at = (day: string) => `${day} 11:00:00.000000000`;

function span(over: Partial<SpanRow> & Pick<SpanRow, 'span_id'>): SpanRow {
  const start = (over.start_time as string | undefined) ?? at('2026-12-02');
  return {
    cluster: 'c1',
    request_id: `room-${over.span_id}`,
    generation: 0,
    name: 'pd.hold',
    trace_id: 't1',
    start_time: start,
    end_time: start,
    engine_id: 'decode-0',
    engine_role: 'decode',
    engine_version: 'v1',
    backend: 'mooncake',
    capacity_slots: 4096,
    hold_timeout_ms: 30_000,
    slots: 4,
    ...over,
  };
}

/** A row DateTime64(9, 'UTC') cannot hold (it ends in 2262): ClickHouse refuses it with 407 DECIMAL_OVERFLOW. */
const year2300 = (spanId: string) => span({ span_id: spanId, start_time: at('2300-01-01') });

async function rows(client: ClickHouseClient, query: string, database: string): Promise<Record<string, unknown>[]> {
  const result = await client.query({ query, query_params: { db: database }, format: 'JSONEachRow' });
  return (await result.json()) as Record<string, unknown>[];
}

const storedSpanIds = async (client: ClickHouseClient, database: string) =>
  (await rows(client, 'SELECT DISTINCT span_id FROM {db:Identifier}.spans ORDER BY span_id', database)).map((r) => r.span_id);

const deadLetters = (client: ClickHouseClient, database: string) =>
  rows(
    client,
    'SELECT span_id, request_id, error_code, error_name, error_message, columns, row FROM {db:Identifier}.span_dead_letters FINAL ORDER BY span_id',
    database,
  );

/** The value of a counter's series with these labels (0 when absent). */
async function counted(
  counter: PipelineMetrics['deadLetterRows' | 'insertFailures' | 'rowsInserted'],
  labels: Record<string, string> = {},
): Promise<number> {
  const { values } = await counter.get();
  return values
    .filter((v) => Object.entries(labels).every(([k, value]) => (v.labels as Record<string, unknown>)[k] === value))
    .reduce((n, v) => n + v.value, 0);
}

/** Whether `work` settles within `ms`, and how. */
async function settleWithin(work: Promise<unknown>, ms: number): Promise<'resolved' | 'rejected' | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  try {
    return await Promise.race([
      work.then(
        () => 'resolved' as const,
        () => 'rejected' as const,
      ),
      pending,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function newWriter(client: ClickHouseClient, database: string) {
  const metrics = createPipelineMetrics();
  const writer = new SpanWriter({
    client,
    database,
    maxBatchRows: 10_000,
    lingerMs: 20,
    retry: { initialMs: 50, maxMs: 200 },
    metrics,
    log: quietLog,
  });
  return { metrics, writer };
}

describe('rows ClickHouse refuses, on embedded ClickHouse', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  it('go to span_dead_letters with their error; the other rows of the batch, from every writer, are stored and every write resolves', async () => {
    const database = randomDatabase('dlq');
    await migrate(client, { database, retentionDays: 30 });
    const { metrics, writer } = newWriter(client, database);
    try {
      // Two writers whose rows share one INSERT, each with a row ClickHouse refuses among valid ones.
      const first = encodeRows([
        span({ span_id: 'a1' }),
        span({ span_id: 'a2' }),
        year2300('a3-bad'),
        span({ span_id: 'a4' }),
        span({ span_id: 'a5' }),
      ]);
      const second = encodeRows([span({ span_id: 'b1' }), year2300('b2-bad'), span({ span_id: 'b3' })]);
      const writes = [writer.write(first), writer.write(second)];
      for (const w of writes) assert.equal(await settleWithin(w, 30_000), 'resolved');

      assert.deepEqual(await storedSpanIds(client, database), ['a1', 'a2', 'a4', 'a5', 'b1', 'b3']);
      const dead = await deadLetters(client, database);
      assert.deepEqual(
        dead.map((d) => [d.span_id, d.request_id, d.error_code, d.error_name]),
        [
          ['a3-bad', 'room-a3-bad', 407, 'DECIMAL_OVERFLOW'],
          ['b2-bad', 'room-b2-bad', 407, 'DECIMAL_OVERFLOW'],
        ],
      );
      const a3 = dead[0] as { columns: Record<string, string>; row: string; error_message: string };
      assert.equal(a3.columns.start_time, at('2300-01-01'));
      assert.equal(`${a3.row}\n`, encodeRows([year2300('a3-bad')]).text, 'the row as sent, to replay');
      assert.match(a3.error_message, /overflow/i);
      assert.equal(await counted(metrics.deadLetterRows, { code: '407', error: 'DECIMAL_OVERFLOW' }), 2);
      assert.equal(await counted(metrics.rowsInserted), 6);
      // The stored rows' records were refreshed as usual.
      const records = await rows(client, 'SELECT request_id FROM {db:Identifier}.lifecycle_records FINAL ORDER BY request_id', database);
      assert.deepEqual(
        records.map((r) => r.request_id),
        ['room-a1', 'room-a2', 'room-a4', 'room-a5', 'room-b1', 'room-b3'],
      );

      // The batch again (a replay after a crash before the offset commit): stored the same, no second dead letter.
      assert.equal(await settleWithin(writer.write(first), 30_000), 'resolved');
      assert.equal((await deadLetters(client, database)).length, 2);
      assert.deepEqual(await storedSpanIds(client, database), ['a1', 'a2', 'a4', 'a5', 'b1', 'b3']);
      assert.equal(await counted(metrics.deadLetterRows, {}), 3, 'the counter counts what was refused, replays included');
    } finally {
      await writer.shutdown();
    }
  });

  it("a missing table is not the rows' fault: retried, nothing dead-lettered, stored once it is back", async () => {
    const database = randomDatabase('dlq');
    await migrate(client, { database, retentionDays: 30 });
    const { metrics, writer } = newWriter(client, database);
    try {
      await client.command({ query: 'DETACH TABLE {db:Identifier}.spans', query_params: { db: database } });
      const write = writer.write(encodeRows([span({ span_id: 's1' }), span({ span_id: 's2' })]));
      await waitFor('a retried UNKNOWN_TABLE', async () => (await counted(metrics.insertFailures, { retriable: 'false' })) >= 3, 10_000);
      assert.equal(await settleWithin(write, 0), 'pending');
      assert.equal(await counted(metrics.deadLetterRows, {}), 0);
      await client.command({ query: 'ATTACH TABLE {db:Identifier}.spans', query_params: { db: database } });
      assert.equal(await settleWithin(write, 10_000), 'resolved');
      assert.deepEqual(await storedSpanIds(client, database), ['s1', 's2']);
      assert.equal((await deadLetters(client, database)).length, 0);
    } finally {
      await writer.shutdown();
    }
  });
});

describe('ClickHouse outages, on a ClickHouse server that is killed', { timeout: 60_000 }, () => {
  let server: ClickHouseServer;
  let client: ClickHouseClient;
  before(async () => {
    server = await startClickHouseServer();
    client = clickhouseClient(server.url);
  });
  after(async () => {
    await client?.close();
    await server?.stop();
  });

  it('are retried with backoff: nothing is dead-lettered or lost, and the write resolves once ClickHouse is back', async () => {
    const database = randomDatabase('outage');
    await migrate(client, { database, retentionDays: 30 });
    const { metrics, writer } = newWriter(client, database);
    try {
      await server.kill();
      const write = writer.write(encodeRows([span({ span_id: 'o1' }), span({ span_id: 'o2' }), span({ span_id: 'o3' })]));
      await waitFor(
        'retried failures while ClickHouse is down',
        async () => (await counted(metrics.insertFailures, { retriable: 'true' })) >= 3,
        10_000,
      );
      assert.equal(await settleWithin(write, 0), 'pending');
      await server.restart();
      assert.equal(await settleWithin(write, 15_000), 'resolved');
      assert.deepEqual(await storedSpanIds(client, database), ['o1', 'o2', 'o3']);
      assert.equal(await counted(metrics.insertFailures, { retriable: 'false' }), 0);
      assert.equal(await counted(metrics.deadLetterRows, {}), 0);
      assert.equal((await deadLetters(client, database)).length, 0);
    } finally {
      await writer.shutdown();
    }
  });

  it('shutdown ends a retry loop at once and rejects the writers whose rows are not stored', async () => {
    const database = randomDatabase('outage');
    await migrate(client, { database, retentionDays: 30 });
    // A long backoff: without the abort, shutdown would wait out a pause of seconds.
    const metrics = createPipelineMetrics();
    const writer = new SpanWriter({
      client,
      database,
      maxBatchRows: 10_000,
      lingerMs: 20,
      retry: { initialMs: 10_000, maxMs: 10_000 },
      metrics,
      log: quietLog,
    });
    await server.kill();
    try {
      const write = writer.write(encodeRows([span({ span_id: 'x1' })]));
      await waitFor('a retried failure', async () => (await counted(metrics.insertFailures, { retriable: 'true' })) >= 1, 10_000);
      const started = performance.now();
      assert.equal(await settleWithin(writer.shutdown(), 5000), 'resolved', 'shutdown returned');
      const tookMs = performance.now() - started;
      assert.ok(tookMs < 2000, `shutdown took ${Math.round(tookMs)} ms`);
      assert.equal(await settleWithin(write, 0), 'rejected');
      assert.equal(await settleWithin(writer.write(encodeRows([span({ span_id: 'x2' })])), 0), 'rejected', 'a write after shutdown');
    } finally {
      await server.restart();
    }
    assert.deepEqual(await storedSpanIds(client, database), []);
  });
});

// Embedded ClickHouse takes the pipeline's rows as TabSeparated text, a server as Native blocks, which the writer reads
// back into rows to find the refused ones.
for (const kind of ['embedded', 'server'] as const)
  describe(`rows ClickHouse refuses, behind Kafka (${kind} ClickHouse)`, () => {
    let mock: KafkaMock;
    let client: ClickHouseClient;
    let server: ClickHouseServer | undefined;
    before(async () => {
      mock = await startKafkaMock({ brokers: 1 });
      if (kind === 'server') {
        server = await startClickHouseServer();
        client = clickhouseClient(server.url);
      } else client = await embeddedClickHouse();
    });
    after(async () => {
      await client?.close();
      await server?.stop();
      await mock?.stop();
    });

    it('are dead-lettered, the rest stored, and the group commits every partition to its end', { timeout: 90_000 }, async () => {
      const stack = await startStack(mock, client, { partitions: 3 });
      try {
        const { database, topic } = stack;
        // ClickHouse refuses every row of the poisoned requests (VIOLATED_CONSTRAINT), whatever the validator lets through.
        await client.command({
          query: "ALTER TABLE {db:Identifier}.spans ADD CONSTRAINT refuse_poison CHECK request_id NOT LIKE 'poison%'",
          query_params: { db: database },
        });
        const good = await simulate(stack.collectorUrl, 'steady', 31, 30, 'fine');
        const poisoned = await simulate(stack.collectorUrl, 'steady', 32, 2, 'poison');
        await waitForSpans(client, database, good.spansEmitted, 30_000);
        await waitForGroupCaughtUp(mock, `g-${topic}`, topic);
        const dead = await deadLetters(client, database);
        assert.equal(dead.length, poisoned.spansEmitted);
        assert.ok(
          dead.every((d) => String(d.request_id).startsWith('poison') && d.error_name === 'VIOLATED_CONSTRAINT'),
          JSON.stringify(dead[0]),
        );
        const stored = await rows(
          client,
          "SELECT count() AS n, countIf(request_id LIKE 'poison%') AS poisoned FROM (SELECT DISTINCT request_id, trace_id, span_id FROM {db:Identifier}.spans)",
          database,
        );
        assert.deepEqual(stored[0], { n: good.spansEmitted, poisoned: 0 });
        assert.equal(await counted(stack.pipeline.metrics.deadLetterRows, { error: 'VIOLATED_CONSTRAINT' }), poisoned.spansEmitted);
      } finally {
        await stack.stop();
      }
    });
  });
