/**
 * `holdscope collector` as its own OS process (`node bin/holdscope.js collector`), flooded far beyond capacity
 * with concurrent OTLP protobuf requests while librdkafka's mock Kafka cluster is slow, then down, then back.
 *
 * The promise under test (docs/collector.md): a 200 means every PD span of the request is in Kafka; past
 * --max-pending-spans the answer is 429, while Kafka is unreachable or slow past --produce-timeout-ms it is
 * 503, both with Retry-After. So: every answer is 200, 429 or 503; every span of every 200 is in Kafka and,
 * once the pipeline (the Pipeline class, on embedded ClickHouse through chdb) has caught up, in ClickHouse; no
 * span of a 429 ever reaches Kafka (the request is refused before it is queued); and the process survives.
 *
 * The CLI has no flag for the number of Kafka sends in flight (the queue's maxInflightSends, 4 by default), so
 * saturation comes from a small --max-pending-spans and 150 ms of round-trip latency on every broker.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Kafka } from 'kafkajs';
import type { ClickHouseClient } from '../../common/index.ts';
import { decodeOtlpProtobuf, encodeOtlpProtobuf, forEachSpan } from '../../contract/index.ts';
import { migrate, Pipeline, pipelineConfigSchema } from '../../pipeline/index.ts';
import { spawnCollector, type CollectorProcess } from '../support/collector-process.ts';
import { holdRequest, holdSpan, nowNs } from '../support/fuzz-otlp.ts';
import {
  kafkaForTests,
  KAFKA_TEST_HEARTBEAT_INTERVAL_MS,
  KAFKA_TEST_SESSION_TIMEOUT_MS,
  randomTopic,
  startKafkaMock,
  type KafkaMock,
} from '../support/kafka-mock.ts';
import { readTopic } from '../support/kafka-read.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

/** Spans the collector lets wait for Kafka before it answers 429: about 50 requests' worth. */
const MAX_PENDING_SPANS = 600;
/** How long a request waits for Kafka before 503. */
const PRODUCE_TIMEOUT_MS = 3000;
/** Requests in flight at once. */
const CONCURRENCY = 300;
/** Each request: REQUEST_IDS lifecycles of SPANS_PER_ID pd.hold spans, every span id distinct. */
const REQUEST_IDS = 2;
const SPANS_PER_ID = 6;
/**
 * Most requests sent; the phases below must complete within it. It also bounds what reaches Kafka, which matters:
 * the mock keeps about 5 MB per partition and silently drops older data beyond that.
 */
const MAX_REQUESTS = 25_000;
const RTT_MS = 150;

type Phase = 'slow' | 'down' | 'back';

interface Sent {
  index: number;
  /** The phase when the request was sent, and when its answer came. */
  phase: Phase;
  answeredIn: Phase;
  spanIds: string[];
  status: number;
  retryAfter: string | null;
  error?: string;
}

describe('faults: collector flood (`holdscope collector` process, mock Kafka slow, down and back, pipeline into chdb)', () => {
  let mock: KafkaMock;
  let kafka: Kafka;
  let collector: CollectorProcess | undefined;
  let client: ClickHouseClient | undefined;
  let pipeline: Pipeline | undefined;

  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
    kafka = kafkaForTests(mock.brokers);
  });
  after(async () => {
    await collector?.stop();
    await pipeline?.shutdown().catch(() => undefined);
    await client?.close();
    for (const id of mock?.brokerIds ?? []) await mock.setRtt(id, 0).catch(() => undefined);
    await mock?.stop();
  });

  it(
    'answers 200, 429 or 503 only; every acknowledged span is in Kafka and then in ClickHouse; no 429 span is',
    { timeout: 300_000 },
    async (t) => {
      const started = Date.now();
      const topic = randomTopic('flood-spans');
      await mock.createTopic(topic, 12);
      await mock.createTopic(`${topic}-dlq`, 2);
      const proc = await spawnCollector([
        '--kafka-brokers',
        mock.brokers.join(','),
        '--topic',
        topic,
        '--dead-letter-topic',
        `${topic}-dlq`,
        '--max-pending-spans',
        String(MAX_PENDING_SPANS),
        '--produce-timeout-ms',
        String(PRODUCE_TIMEOUT_MS),
      ]);
      collector = proc;
      const step = (what: string) => t.diagnostic(`${((Date.now() - started) / 1000).toFixed(1)} s: ${what}`);
      for (const id of mock.brokerIds) await mock.setRtt(id, RTT_MS);

      // The flood: CONCURRENCY workers, each sending one request after another, tracked one by one.
      const runId = randomBytes(4).toString('hex');
      const traceId = randomBytes(16).toString('hex');
      const results: Sent[] = [];
      const counts = { 200: 0, 429: 0, 503: 0 } as Record<number, number>;
      let phase: Phase = 'slow';
      let acksBack = 0;
      let next = 0;
      let stop = false;
      const sendOne = async (index: number): Promise<void> => {
        const t0 = nowNs();
        const spans = [];
        for (let r = 0; r < REQUEST_IDS; r++) {
          for (let k = 0; k < SPANS_PER_ID; k++) {
            // 16 hex digits, unique in the run: 8 of the run, 8 of the span's number.
            const spanId = runId + (index * REQUEST_IDS * SPANS_PER_ID + r * SPANS_PER_ID + k).toString(16).padStart(8, '0');
            spans.push(holdSpan(`flood-${runId}-${index}-${r}`, spanId, traceId, t0 + BigInt(k)));
          }
        }
        const body = Buffer.from(encodeOtlpProtobuf(holdRequest(spans)));
        const sentIn = phase;
        const sent: Sent = { index, phase: sentIn, answeredIn: sentIn, spanIds: spans.map((s) => s.spanId), status: 0, retryAfter: null };
        try {
          const res = await fetch(`${proc.url}/v1/traces`, {
            method: 'POST',
            body,
            headers: { 'content-type': 'application/x-protobuf' },
            signal: AbortSignal.timeout(60_000),
          });
          await res.arrayBuffer();
          sent.status = res.status;
          sent.retryAfter = res.headers.get('retry-after');
        } catch (error) {
          sent.error = `${(error as Error).message} ${String((error as Error).cause ?? '')}`;
        }
        sent.answeredIn = phase;
        results.push(sent);
        counts[sent.status] = (counts[sent.status] ?? 0) + 1;
        if (sent.status === 200 && sentIn === 'back') acksBack++;
      };
      const workers = Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (!stop && next < MAX_REQUESTS) await sendOne(next++);
        }),
      );
      const progress = () =>
        `${results.length} answered (${Object.entries(counts)
          .map(([s, n]) => `${s}: ${n}`)
          .join(', ')}), ${acksBack} acknowledged since Kafka is back; ${proc.describe()}`;
      const waitUntil = async (what: string, condition: () => boolean, timeoutMs: number) => {
        const deadline = Date.now() + timeoutMs;
        while (!condition()) {
          if (Date.now() > deadline || next >= MAX_REQUESTS || !proc.alive()) {
            stop = true;
            await workers;
            assert.fail(`${what}: not within ${timeoutMs} ms and ${MAX_REQUESTS} requests: ${progress()}`);
          }
          await sleep(50);
        }
      };

      // 1. Kafka slow: the queue fills, some requests are acknowledged, the rest refused with 429.
      await waitUntil('200s and 429s while Kafka is slow', () => (counts[200] ?? 0) >= 150 && (counts[429] ?? 0) >= 100, 60_000);
      step(`saturated: ${progress().split(';')[0]}`);
      // 2. Kafka down: what waits for it times out or fails (503); new requests meet a full queue (429) or a failing one (503).
      await mock.allDown();
      phase = 'down';
      const before503 = counts[503] ?? 0;
      // /readyz while Kafka is down, for the record (docs/collector.md: 503 while Kafka is down).
      const readyz = new Map<number, number>();
      const probe = setInterval(() => {
        void fetch(`${proc.url}/readyz`, { signal: AbortSignal.timeout(5000) }).then(
          (r) => readyz.set(r.status, (readyz.get(r.status) ?? 0) + 1),
          () => readyz.set(0, (readyz.get(0) ?? 0) + 1),
        );
      }, 250);
      try {
        await waitUntil('503s while Kafka is down', () => (counts[503] ?? 0) - before503 >= 20, 60_000);
      } finally {
        clearInterval(probe);
      }
      step(`Kafka down: ${progress().split(';')[0]}; /readyz answers while down: ${[...readyz].map(([s, n]) => `${s}: ${n}`).join(', ')}`);
      // 3. Kafka back: the collector reconnects and acknowledges again.
      await mock.allUp();
      phase = 'back';
      await waitUntil('200s after Kafka is back', () => acksBack >= 150, 90_000);
      stop = true;
      await workers;
      const floodSeconds = (Date.now() - started) / 1000;
      step(`flood over: ${progress().split(';')[0]}`);

      // The process survived the flood and still takes a request.
      assert.ok(proc.alive(), proc.describe());
      assert.equal((await fetch(`${proc.url}/healthz`)).status, 200, proc.describe());
      for (const id of mock.brokerIds) await mock.setRtt(id, 0);

      // Kafka: every acknowledged span is there; no span of a 429 is.
      const inKafka = new Set<string>();
      for (const m of await readTopic(kafka, topic, 60_000)) forEachSpan(decodeOtlpProtobuf(m.value), (span) => inKafka.add(span.spanId));
      step(`${inKafka.size} distinct spans in Kafka`);
      const acked = results.filter((r) => r.status === 200);
      const refused = results.filter((r) => r.status === 429);
      const unavailable = results.filter((r) => r.status === 503);
      const ackedIds = acked.flatMap((r) => r.spanIds);
      const missingFromKafka = ackedIds.filter((id) => !inKafka.has(id));
      const refusedInKafka = refused.flatMap((r) => r.spanIds).filter((id) => inKafka.has(id));
      // At-least-once: a request answered 503 because Kafka did not acknowledge within the produce timeout may still
      // have reached Kafka later (or a send that failed may have been appended before the connection dropped). Its
      // sender retries, and the duplicate changes nothing downstream. Counted, not forbidden.
      const unavailableInKafka = unavailable.filter((r) => r.spanIds.some((id) => inKafka.has(id)));

      // ClickHouse: the pipeline, started now that the flood is over, stores everything Kafka has.
      client = await embeddedClickHouse('holdscope-flood-chdb-');
      const database = randomDatabase('flood');
      await migrate(client, { database, retentionDays: 30 });
      pipeline = new Pipeline(
        pipelineConfigSchema.parse({
          kafkaBrokers: mock.brokers.join(','),
          topics: topic,
          groupId: `g-${topic}`,
          database,
          lingerMs: 50,
          sessionTimeoutMs: KAFKA_TEST_SESSION_TIMEOUT_MS,
          heartbeatIntervalMs: KAFKA_TEST_HEARTBEAT_INTERVAL_MS,
        }),
        { log: quietLog, client },
      );
      await pipeline.start();
      const ch = client;
      const storedIds = async () => {
        const result = await ch.query({ query: `SELECT DISTINCT span_id FROM ${database}.spans`, format: 'JSONEachRow' });
        return new Set(((await result.json()) as { span_id: string }[]).map((r) => r.span_id));
      };
      let stored = await storedIds();
      const deadline = Date.now() + 90_000;
      while ([...inKafka].some((id) => !stored.has(id)) && Date.now() < deadline) {
        await sleep(250);
        stored = await storedIds();
      }
      step(`${stored.size} distinct spans in ClickHouse`);
      const missingFromClickHouse = ackedIds.filter((id) => !stored.has(id));
      const rejectedStored = [...refused, ...unavailable].flatMap((r) => r.spanIds).filter((id) => stored.has(id)).length;

      const spansPer = REQUEST_IDS * SPANS_PER_ID;
      console.log(
        `faults: collector flood: ${results.length * spansPer} spans offered in ${results.length} requests (${CONCURRENCY} in flight), ` +
          `${acked.length * spansPer} acknowledged (200), ${refused.length * spansPer} rejected 429, ${unavailable.length * spansPer} rejected 503, ` +
          `${stored.size} stored in ClickHouse (${rejectedStored} of them from rejected requests: ${unavailableInKafka.length} requests answered 503 reached Kafka anyway), ` +
          `other answers ${results.length - acked.length - refused.length - unavailable.length}; flood ${floodSeconds.toFixed(1)} s, wall ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );

      const others = results.filter((r) => ![200, 429, 503].includes(r.status));
      assert.deepEqual(
        others.slice(0, 10).map((r) => `request ${r.index} (${r.phase}): ${r.status} ${r.error ?? ''}`),
        [],
        `${others.length} answers other than 200, 429, 503`,
      );
      assert.ok(refused.length > 0 && unavailable.length > 0, `both 429 and 503 happened: ${progress()}`);
      const noRetryAfter = [...refused, ...unavailable].filter((r) => !(Number(r.retryAfter) >= 1));
      assert.deepEqual(
        noRetryAfter.slice(0, 10).map((r) => `request ${r.index}: ${r.status} Retry-After ${r.retryAfter}`),
        [],
        `${noRetryAfter.length} 429/503 without a Retry-After`,
      );
      assert.ok(
        unavailable.some((r) => r.answeredIn === 'down'),
        '503s came while Kafka was down',
      );
      assert.deepEqual(
        missingFromKafka.slice(0, 10),
        [],
        `${missingFromKafka.length} of ${ackedIds.length} acknowledged spans are not in Kafka`,
      );
      assert.deepEqual(refusedInKafka.slice(0, 10), [], `${refusedInKafka.length} spans answered 429 reached Kafka`);
      assert.deepEqual(
        missingFromClickHouse.slice(0, 10),
        [],
        `${missingFromClickHouse.length} of ${ackedIds.length} acknowledged spans are not in ClickHouse`,
      );
      assert.equal([...inKafka].filter((id) => !stored.has(id)).length, 0, 'every span in Kafka is in ClickHouse');

      // Still serving after all of it, and it stops cleanly (draining to Kafka).
      const last = holdRequest([holdSpan(`flood-${runId}-last`, randomBytes(8).toString('hex'), traceId, nowNs())]);
      const lastRes = await fetch(`${proc.url}/v1/traces`, {
        method: 'POST',
        body: Buffer.from(encodeOtlpProtobuf(last)),
        headers: { 'content-type': 'application/x-protobuf' },
      });
      assert.equal(lastRes.status, 200, proc.describe());
      assert.ok(proc.alive(), proc.describe());
      assert.equal(await proc.stop(), 'exit code 0', proc.describe());
    },
  );
});
