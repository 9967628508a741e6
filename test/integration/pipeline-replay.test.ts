import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Kafka } from 'kafkajs';
import { startOtlpReceiver } from '../support/otlp-sink.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { encodeOtlpJson, encodeOtlpProtobuf, type OtlpTraceRequest } from '../../contract/index.ts';
import { buildScenario, runSimulation, type LifecycleTruth } from '../../emitter/index.ts';
import { migrate, Pipeline, pipelineConfigSchema } from '../../pipeline/index.ts';
import { kafkaForTests, randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { readTopic } from '../support/kafka-read.ts';
import { quietLog, randomDatabase, startStack, waitForSpans } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

/** Everything a reader can see of a database: every lifecycle record in key order, and the counts. */
async function snapshot(client: ClickHouseClient, database: string) {
  const query = async (sql: string) =>
    (await (await client.query({ query: sql, format: 'JSONEachRow' })).json()) as Record<string, unknown>[];
  return {
    lifecycles: await query(`SELECT * FROM ${database}.lifecycles ORDER BY cluster, request_id, generation`),
    distinctSpans: await query(`SELECT count() AS n FROM (SELECT DISTINCT trace_id, span_id FROM ${database}.spans)`),
    spansFinal: await query(`SELECT count() AS n FROM ${database}.spans FINAL`),
    lifecycleCount: await query(`SELECT count() AS n FROM ${database}.lifecycles`),
  };
}

/** Fisher-Yates with a seeded generator, so a failure replays the same order. */
function shuffle<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let s = seed >>> 0;
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

async function produce(kafka: Kafka, topic: string, messages: { key: string | null; value: Buffer }[], partitions?: number): Promise<void> {
  const producer = kafka.producer();
  await producer.connect();
  try {
    for (let i = 0; i < messages.length; i += 500) {
      await producer.send({
        topic,
        acks: -1,
        messages: messages
          .slice(i, i + 500)
          .map((m, k) => ({ key: m.key, value: m.value, ...(partitions ? { partition: (i + k) % partitions } : {}) })),
      });
    }
  } finally {
    await producer.disconnect();
  }
}

describe('replays and foreign formats change nothing', () => {
  let mock: KafkaMock;
  let kafka: Kafka;
  let client: ClickHouseClient;
  const requests: OtlpTraceRequest[] = [];
  let truth: LifecycleTruth[] = [];
  let spansEmitted = 0;
  let reference: Awaited<ReturnType<typeof snapshot>>;
  let stack: Awaited<ReturnType<typeof startStack>>;

  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
    kafka = kafkaForTests(mock.brokers);
    client = await embeddedClickHouse();
    // The simulator's OTLP requests, captured once, are the input of every test below.
    const receiver = await startOtlpReceiver({ port: 0, onRequest: (r) => void requests.push(r) });
    const scenario = buildScenario('mixed', 77);
    scenario.config.requests = 400;
    const summary = await runSimulation({
      config: scenario.config,
      endpoint: receiver.url,
      startTimeMs: Date.now() - 3_600_000,
      pace: 'fast',
      batchSize: 300,
    });
    await receiver.close();
    truth = summary.truth;
    spansEmitted = summary.spansEmitted;
    stack = await startStack(mock, client);
    for (const request of requests) {
      const res = await fetch(`${stack.collectorUrl}/v1/traces`, {
        method: 'POST',
        body: encodeOtlpProtobuf(request),
        headers: { 'content-type': 'application/x-protobuf' },
      });
      assert.equal(res.status, 200);
    }
    await waitForSpans(client, stack.database, spansEmitted);
    await stack.pipeline.flush();
    reference = await snapshot(client, stack.database);
  });
  after(async () => {
    await stack?.stop();
    await client?.close();
    await mock?.stop();
  });

  it('stores each lifecycle once, and the consumer group has no lag left', async () => {
    assert.equal(reference.lifecycles.length, truth.length);
    assert.equal(Number(reference.distinctSpans[0]?.n), spansEmitted);
    await stack.pipeline.sampleLag();
    const lag = (await stack.pipeline.metrics.consumerLag.get()).values.find((v) => v.labels.topic === stack.topic);
    assert.equal(lag?.value, 0);
  });

  it('the same messages replayed twice, shuffled, leave identical records and counts', async () => {
    const messages = await readTopic(kafka, stack.topic);
    assert.ok(messages.length > 100);
    const replay = shuffle([...messages, ...messages], 5).map((m) => ({ key: m.key, value: m.value }));
    // Spread over partitions regardless of key: correctness must not depend on partitioning.
    await produce(kafka, stack.topic, replay, 6);
    // The pipeline has inserted the original once; wait until it inserted the replay's two copies as well.
    const deadline = Date.now() + 60_000;
    const inserted = async () => (await stack.pipeline.metrics.rowsInserted.get()).values[0]?.value ?? 0;
    while ((await inserted()) < spansEmitted * 3) {
      assert.ok(Date.now() < deadline, `replay not consumed: ${await inserted()} rows inserted of ${spansEmitted * 3}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    await stack.pipeline.flush();
    assert.deepEqual(await snapshot(client, stack.database), reference);
  });

  it("reads the OpenTelemetry Collector Kafka exporter's otlp_proto and otlp_json messages into the same records", async () => {
    const topic = randomTopic('otlp_spans');
    await mock.createTopic(topic, 4);
    const database = randomDatabase('otlp');
    await migrate(client, { database, retentionDays: 30 });
    // The exporter writes whole batches of many traces per message, with no key by default.
    const messages = requests.map((r, i) => ({ key: null, value: Buffer.from(i % 2 === 0 ? encodeOtlpProtobuf(r) : encodeOtlpJson(r)) }));
    await produce(kafka, topic, shuffle(messages, 9), 4);
    const pipeline = new Pipeline(
      pipelineConfigSchema.parse({
        kafkaBrokers: mock.brokers.join(','),
        topics: topic,
        groupId: `g-${randomBytes(4).toString('hex')}`,
        database,
        lingerMs: 50,
        sessionTimeoutMs: 6000,
        heartbeatIntervalMs: 1000,
      }),
      { log: quietLog, client },
    );
    await pipeline.start();
    try {
      await waitForSpans(client, database, spansEmitted);
      await pipeline.flush();
      const got = await snapshot(client, database);
      assert.deepEqual(got.lifecycles, reference.lifecycles);
      assert.deepEqual(got.distinctSpans, reference.distinctSpans);
    } finally {
      await pipeline.shutdown().catch(() => undefined);
    }
  });
});
