import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import type { Kafka } from 'kafkajs';
import { Collector, collectorConfigSchema, type CollectorConfig } from '../../collector/index.ts';
import { createLogger } from '../../common/index.ts';
import {
  decodeOtlpProtobuf,
  encodeOtlpJson,
  encodeOtlpProtobuf,
  forEachSpan,
  partitionKey,
  type OtlpTraceRequest,
} from '../../contract/index.ts';
import { buildScenario, runSimulation } from '../../emitter/index.ts';
import { kafkaForTests, randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { kafkajsPartition, readTopic } from '../support/kafka-read.ts';

const log = createLogger('test', 'silent');
const SPAN_PARTITIONS = 6;

async function startCollector(mock: KafkaMock, over: Partial<Record<keyof CollectorConfig, unknown>> = {}) {
  const topic = randomTopic('spans');
  const deadLetterTopic = randomTopic('dlq');
  await mock.createTopic(topic, SPAN_PARTITIONS);
  await mock.createTopic(deadLetterTopic, 2);
  const config = collectorConfigSchema.parse({
    port: 0,
    host: '127.0.0.1',
    kafkaBrokers: mock.brokers.join(','),
    topic,
    deadLetterTopic,
    ...over,
  });
  const collector = new Collector(config, { log });
  const port = await collector.start();
  return { collector, url: `http://127.0.0.1:${port}`, topic, deadLetterTopic };
}

/** Every span of the topic's messages, with the message key and partition it came under. */
function spansOf(messages: { key: string | null; value: Buffer; partition: number }[]) {
  const spans: { key: string | null; partition: number; expectedKey: string; spanId: string; name: string }[] = [];
  for (const m of messages) {
    forEachSpan(decodeOtlpProtobuf(m.value), (span, resource) => {
      const cluster = typeof resource['pd.cluster'] === 'string' ? resource['pd.cluster'] : 'default';
      spans.push({
        key: m.key,
        partition: m.partition,
        expectedKey: partitionKey(cluster, span.attributes['pd.request.id'] as string),
        spanId: span.spanId,
        name: span.name,
      });
    });
  }
  return spans;
}

/** One pd.hold span; an override of `undefined` removes the attribute. */
function pdSpanRequest(overrides: Record<string, unknown> = {}, name = 'pd.hold'): OtlpTraceRequest {
  // A minute ago: the collector rejects spans outside its clock skew and retention.
  const t = BigInt(Date.now() - 60_000) * 1_000_000n;
  const attributes: Record<string, unknown> = {
    'pd.request.id': 'req-1',
    'pd.request.generation': 0,
    'pd.hold.expected_ranks': [0, 1],
    'pd.hold.timeout_ms': 30000,
    'pd.kv.slots': 64,
    'pd.kv.pages': [1, 2, 3, 4],
    ...overrides,
  };
  for (const [k, v] of Object.entries(attributes)) if (v === undefined) delete attributes[k];
  return {
    resourceSpans: [
      {
        resource: {
          'pd.role': 'decode',
          'pd.engine.id': 'decode-x',
          'pd.engine.version': 'v1',
          'pd.transfer.backend': 'mooncake',
          'pd.kv.capacity_slots': 1000,
        },
        scopeSpans: [
          {
            scope: { name: 'test', version: '1' },
            spans: [
              {
                traceId: randomBytes(16).toString('hex'),
                spanId: randomBytes(8).toString('hex'),
                parentSpanId: '',
                name,
                kind: 1,
                startTimeUnixNano: t,
                endTimeUnixNano: t,
                attributes: attributes as OtlpTraceRequest['resourceSpans'][0]['scopeSpans'][0]['spans'][0]['attributes'],
                statusCode: 0,
                statusMessage: '',
              },
            ],
          },
        ],
      },
    ],
  };
}

const post = (url: string, body: Buffer | string, headers: Record<string, string>) =>
  fetch(`${url}/v1/traces`, { method: 'POST', body, headers });
const proto = { 'content-type': 'application/x-protobuf' };
const json = { 'content-type': 'application/json' };

describe('collector', () => {
  let mock: KafkaMock;
  let kafka: Kafka;
  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
    kafka = kafkaForTests(mock.brokers);
  });
  after(() => mock.stop());

  for (const [encoding, Exporter] of [
    ['protobuf', ProtoExporter],
    ['json', JsonExporter],
  ] as const) {
    it(`delivers every span the OpenTelemetry SDK's ${encoding} exporter sends, in its lifecycle key's partition`, async () => {
      const { collector, url, topic } = await startCollector(mock);
      try {
        const scenario = buildScenario('mixed', 31);
        scenario.config.requests = 400;
        const summary = await runSimulation({
          config: scenario.config,
          endpoint: url,
          startTimeMs: Date.now() - 60_000,
          pace: 'fast',
          batchSize: 512,
          exporterFor: () => new Exporter({ url: `${url}/v1/traces` }),
        });
        assert.equal(summary.spansFailed, 0);
        assert.equal(summary.spansExported, summary.spansEmitted);
        const messages = await readTopic(kafka, topic);
        const spans = spansOf(messages);
        assert.equal(spans.length, summary.spansEmitted, 'same count in Kafka as the simulator exported');
        assert.equal(new Set(spans.map((s) => s.spanId)).size, spans.length, 'no span twice');
        for (const s of spans) {
          assert.equal(s.partition, kafkajsPartition(s.expectedKey, SPAN_PARTITIONS), `${s.expectedKey}'s partition`);
          // A message of several lifecycles has no key; one of a single lifecycle has its key.
          if (s.key !== null) assert.equal(s.key, s.expectedKey);
        }
        // Merged per partition: far fewer messages than lifecycles (a message each before, several per lifecycle).
        const lifecycles = new Set(spans.map((s) => s.expectedKey)).size;
        assert.ok(messages.length < lifecycles, `${messages.length} messages for ${lifecycles} lifecycles`);
      } finally {
        await collector.shutdown();
      }
    });
  }

  it('answers malformed input with the right status and a reason, and keeps serving', async () => {
    const { collector, url, deadLetterTopic } = await startCollector(mock, { maxBodyBytes: 1024 * 1024 });
    try {
      const cases: [string, Promise<Response>, number, RegExp][] = [
        ['random bytes', post(url, randomBytes(4096), proto), 400, /protobuf/],
        ['truncated protobuf', post(url, Buffer.from(encodeOtlpProtobuf(pdSpanRequest())).subarray(0, 40), proto), 400, /protobuf/],
        ['JSON of the wrong shape', post(url, JSON.stringify({ resourceSpans: 'nope' }), json), 400, /resourceSpans/],
        ['not JSON', post(url, '{"resourceSpans": [', json), 400, /json/i],
        ['gzip bomb', post(url, gzipSync(Buffer.alloc(64 * 1024 * 1024)), { ...proto, 'content-encoding': 'gzip' }), 413, /larger than/],
        ['corrupt gzip', post(url, randomBytes(1000), { ...proto, 'content-encoding': 'gzip' }), 400, /./],
        ['50 MB body', post(url, Buffer.alloc(50 * 1024 * 1024, 1), proto), 413, /larger than/],
        ['text/plain', post(url, 'hello', { 'content-type': 'text/plain' }), 415, /Content-Type/],
        ['compress encoding', post(url, 'x', { ...proto, 'content-encoding': 'compress' }), 415, /Content-Encoding/],
      ];
      for (const [what, response, status, reason] of cases) {
        const res = await response;
        assert.equal(res.status, status, what);
        const body = res.headers.get('content-type')?.includes('json')
          ? JSON.stringify(await res.json())
          : Buffer.from(await res.arrayBuffer()).toString('latin1');
        assert.match(body, reason, what);
      }
      // Contract violations are partial successes: named in the response, kept in the dead-letter topic.
      const bad = await post(url, encodeOtlpJson(pdSpanRequest({ 'pd.request.id': undefined, 'pd.kv.pages': ['x'] })), json);
      assert.equal(bad.status, 200);
      const partial = (await bad.json()) as { partialSuccess: { rejectedSpans: string; errorMessage: string } };
      assert.equal(partial.partialSuccess.rejectedSpans, '1');
      assert.match(partial.partialSuccess.errorMessage, /pd\.request\.id: expected a non-empty string/);
      const wrongType = await post(url, encodeOtlpJson(pdSpanRequest({ 'pd.kv.pages': ['x'] })), json);
      assert.match(JSON.stringify(await wrongType.json()), /pd\.kv\.pages: expected an array of non-negative integers/);
      const dead = await readTopic(kafka, deadLetterTopic);
      assert.equal(dead.length, 2);
      assert.match(dead.map((d) => d.value.toString()).join('\n'), /pd\.request\.id/);
      // And the next valid request is served.
      const ok = await post(url, Buffer.from(encodeOtlpProtobuf(pdSpanRequest())), proto);
      assert.equal(ok.status, 200);
      assert.equal((await ok.arrayBuffer()).byteLength, 0, 'full success: an empty ExportTraceServiceResponse');
      const metrics = await (await fetch(`${url}/metrics`)).text();
      assert.match(metrics, /holdscope_collector_spans_rejected_total\{field="pd.request.id"\} 1/);
      assert.match(metrics, /holdscope_collector_requests_total\{status="400"\} 5/);
    } finally {
      await collector.shutdown();
    }
  });

  it('requires the bearer token when one is configured', async () => {
    const { collector, url } = await startCollector(mock, { authToken: 'a-very-secret-token-123' });
    try {
      const body = Buffer.from(encodeOtlpProtobuf(pdSpanRequest()));
      assert.equal((await post(url, body, proto)).status, 401);
      assert.equal((await post(url, body, { ...proto, authorization: 'Bearer wrong' })).status, 401);
      assert.equal((await post(url, body, { ...proto, authorization: 'Bearer a-very-secret-token-123' })).status, 200);
    } finally {
      await collector.shutdown();
    }
  });

  it('answers 503 with Retry-After while Kafka is down; the exporter delivers every span after it is back', async () => {
    const { collector, url, topic } = await startCollector(mock, { produceTimeoutMs: 3000 });
    try {
      await mock.allDown();
      const probe = pdSpanRequest();
      const down = await post(url, Buffer.from(encodeOtlpProtobuf(probe)), proto);
      assert.equal(down.status, 503);
      assert.ok(Number(down.headers.get('retry-after')) >= 1);
      const scenario = buildScenario('steady', 32);
      scenario.config.requests = 100;
      const restore = setTimeout(() => void mock.allUp(), 2500);
      const summary = await runSimulation({
        config: scenario.config,
        endpoint: url,
        startTimeMs: Date.now() - 60_000,
        pace: 'fast',
        batchSize: 5000,
        // The SDK's exporter retries a 503 only within its export timeout (10 s by default). The mock's brokers
        // are back after 2.5 s, but kafkajs may take seconds more to reconnect on a loaded machine: the test is
        // about the collector's answers, so the sender is given the patience a production exporter would be.
        exporterFor: () => new ProtoExporter({ url: `${url}/v1/traces`, timeoutMillis: 60_000 }),
      });
      clearTimeout(restore);
      await mock.allUp();
      assert.equal(summary.spansFailed, 0, 'the exporter retried until the collector took every span');
      const spans = spansOf(await readTopic(kafka, topic));
      // The probe answered 503 may still reach Kafka once it is back: a duplicate the sender's retry would repeat.
      const probeId = probe.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.spanId;
      const ids = new Set(spans.map((s) => s.spanId).filter((id) => id !== probeId));
      assert.equal(ids.size, summary.spansEmitted, 'every span arrived (a retried copy may repeat, never be missing)');
    } finally {
      await mock.allUp();
      await collector.shutdown();
    }
  });

  it('answers a flood beyond capacity with 429, and every span it acknowledged is in Kafka', async () => {
    const { collector, url, topic } = await startCollector(mock, { maxPendingSpans: 300, lingerMs: 50, maxInflightSends: 1 });
    try {
      await mock.setRtt(1, 200);
      await mock.setRtt(2, 200);
      await mock.setRtt(3, 200);
      const sent = Array.from({ length: 60 }, (_, i) => {
        const request = pdSpanRequest({ 'pd.request.id': `flood-${i}` });
        const spans = request.resourceSpans[0]!.scopeSpans[0]!.spans;
        for (let k = 1; k < 50; k++) spans.push({ ...spans[0]!, spanId: randomBytes(8).toString('hex') });
        return request;
      });
      const responses = await Promise.all(sent.map((r) => post(url, Buffer.from(encodeOtlpProtobuf(r)), proto)));
      const statuses = responses.map((r) => r.status);
      assert.ok(statuses.includes(429), `statuses: ${statuses.join(',')}`);
      assert.ok(statuses.includes(200));
      for (const r of responses) if (r.status === 429) assert.ok(Number(r.headers.get('retry-after')) >= 1);
      const inKafka = new Set(spansOf(await readTopic(kafka, topic)).map((s) => s.spanId));
      sent.forEach((request, i) => {
        if (statuses[i] !== 200) return;
        for (const span of request.resourceSpans[0]!.scopeSpans[0]!.spans)
          assert.ok(inKafka.has(span.spanId), 'acknowledged span found in Kafka');
      });
    } finally {
      for (const id of [1, 2, 3]) await mock.setRtt(id, 0);
      await collector.shutdown();
    }
  });
});
