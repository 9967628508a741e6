import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Kafka } from 'kafkajs';
import { createLogger, OverloadedError, UnavailableError, type RetryableResult } from '../common/index.ts';
import { DEAD_LETTER_HEADERS, MESSAGE_HEADERS } from '../contract/index.ts';
import type { SpanMessage } from '../contract/index.ts';
import { BATCH_OVERHEAD_BYTES, recordBytes } from './messages.ts';
import { createCollectorMetrics } from './metrics.ts';
import { KafkaSpanQueue, type KafkaSpanQueueOptions } from './span-queue.ts';

interface Send {
  records: { key: string | null; value: Buffer; headers: Record<string, string>; partition?: number }[];
  resolve: () => void;
  reject: (error: Error) => void;
}

/** A kafkajs stand-in: sends succeed, fail or hang as told; the admin's metadata answers while `adminUp`. */
class FakeKafka {
  mode: 'ok' | 'fail' | 'hang' = 'ok';
  adminUp = true;
  /** Partitions the admin reports for the span topic ('spans'); none: the topic is unknown. */
  partitions = 0;
  readonly sends: Send[] = [];

  producer() {
    return {
      events: { DISCONNECT: 'producer.disconnect' },
      on: () => undefined,
      connect: async () => undefined,
      disconnect: async () => undefined,
      sendBatch: ({ topicMessages }: { topicMessages: { messages: Send['records'] }[] }) =>
        new Promise<void>((resolve, reject) => {
          this.sends.push({ records: topicMessages.flatMap((t) => t.messages), resolve, reject });
          if (this.mode === 'ok') resolve();
          else if (this.mode === 'fail') reject(new Error('broker down'));
        }),
    };
  }

  admin() {
    return {
      connect: async () => {
        if (!this.adminUp) throw new Error('connection refused');
      },
      fetchTopicMetadata: async () => ({
        topics:
          this.partitions > 0
            ? [{ name: 'spans', partitions: Array.from({ length: this.partitions }, (_, partitionId) => ({ partitionId })) }]
            : [],
      }),
      disconnect: async () => undefined,
    };
  }
}

async function queueWith(kafka: FakeKafka, options: Partial<KafkaSpanQueueOptions> = {}) {
  const queue = new KafkaSpanQueue({
    kafka: kafka as unknown as Kafka,
    topic: 'spans',
    deadLetterTopic: 'dead',
    maxPendingSpans: 1000,
    maxBatchSpans: 20_000,
    lingerMs: 0,
    maxInflightSends: 4,
    produceTimeoutMs: 200,
    metrics: createCollectorMetrics(),
    log: createLogger('test', 'silent'),
    ...options,
  });
  await queue.start();
  return queue;
}

const message = (key: string, bytes: number, spans = 1): SpanMessage => ({ key, value: Buffer.alloc(bytes, 1), spans });
const status = (r: RetryableResult<void>) =>
  r.kind === 'success' ? 200 : r.error instanceof OverloadedError ? 429 : r.error instanceof UnavailableError ? 503 : 500;

describe('KafkaSpanQueue', () => {
  it('keeps every send within maxSendBytes, splitting a publish over sends, and acknowledges it once all are in', async () => {
    const kafka = new FakeKafka();
    const queue = await queueWith(kafka, { maxSendBytes: 100_000 });
    const messages = Array.from({ length: 30 }, (_, i) => message(`k${i}`, 10_000));
    const dead = [{ key: null, value: Buffer.alloc(5000) }];
    assert.equal(status(await queue.publish(messages, dead)), 200);
    assert.ok(kafka.sends.length >= 4, `${kafka.sends.length} sends`);
    for (const send of kafka.sends) {
      const bytes = send.records.reduce((n, r) => n + recordBytes(r.key, r.value.length, r.headers), 0);
      assert.ok(bytes <= 100_000 - BATCH_OVERHEAD_BYTES, `a send of ${bytes} bytes`);
    }
    assert.equal(kafka.sends.flatMap((s) => s.records).length, 31);
    assert.deepEqual(kafka.sends.flatMap((s) => s.records).at(-1)!.headers, DEAD_LETTER_HEADERS);
    assert.deepEqual(kafka.sends[0]!.records[0]!.headers, MESSAGE_HEADERS);
    await queue.shutdown();
  });

  it("merges a send's span messages per partition once the topic's partitions are known, and not dead letters", async () => {
    const kafka = new FakeKafka();
    kafka.partitions = 3;
    const queue = await queueWith(kafka);
    const messages = Array.from({ length: 30 }, (_, i) => message(`k${i}`, 100, 2));
    const dead = [{ key: null, value: Buffer.alloc(50) }];
    assert.equal(status(await queue.publish(messages, dead)), 200);
    assert.equal(kafka.sends.length, 1);
    const [spanRecords, deadRecords] = [kafka.sends[0]!.records.slice(0, -1), kafka.sends[0]!.records.slice(-1)];
    assert.deepEqual(spanRecords.map((r) => r.partition).sort(), [0, 1, 2]);
    assert.equal(
      spanRecords.reduce((n, r) => n + r.value.length, 0),
      30 * 100,
      'every message in one of them',
    );
    assert.deepEqual(deadRecords[0]!.headers, DEAD_LETTER_HEADERS);
    await queue.shutdown();
  });

  it('answers 429 past the pending limits while Kafka works, 503 once a send timed out, and is not ready until Kafka answers', async () => {
    const kafka = new FakeKafka();
    const queue = await queueWith(kafka, { maxPendingSpans: 10, maxInflightSends: 1 });
    kafka.mode = 'hang';
    kafka.adminUp = false;
    const first = queue.publish([message('a', 100, 8)], []);
    // Over the span limit while nothing has failed yet: the collector is busy, 429.
    assert.equal(status(await queue.publish([message('b', 100, 5)], [])), 429);
    assert.ok(queue.healthy());
    // The first send does not come back within produceTimeoutMs: 503, and Kafka counts as down.
    assert.equal(status(await first), 503);
    assert.ok(!queue.healthy());
    // Its spans still wait for Kafka, so the limit is passed again, but now the answer is 503.
    const refused = await queue.publish([message('c', 100, 5)], []);
    assert.equal(status(refused), 503);
    assert.match(refused.kind === 'success' ? '' : refused.error.message, /Kafka is unavailable \(no acknowledgement within 200 ms\)/);
    // The stuck send gave its slot up: a publish within the limits goes out in a send of its own.
    const second = queue.publish([message('d', 100, 1)], []);
    await sleep(20);
    assert.equal(kafka.sends.length, 2);
    // Kafka answers again (the probe reaches it); sends come back.
    kafka.adminUp = true;
    kafka.mode = 'ok';
    for (const send of kafka.sends) send.resolve();
    assert.equal(status(await second), 200, 'its send came back within its deadline');
    await sleep(50);
    assert.ok(queue.healthy(), 'a send that succeeds makes it ready');
    assert.equal(status(await queue.publish([message('e', 100, 5)], [])), 200);
    await queue.shutdown();
  });

  it('probes Kafka while it fails, so readiness comes back without traffic', async () => {
    const kafka = new FakeKafka();
    const queue = await queueWith(kafka);
    kafka.mode = 'fail';
    kafka.adminUp = false;
    assert.equal(status(await queue.publish([message('a', 100)], [])), 503);
    assert.ok(!queue.healthy());
    kafka.adminUp = true;
    const deadline = Date.now() + 6000;
    while (!queue.healthy() && Date.now() < deadline) await sleep(50);
    assert.ok(queue.healthy(), 'ready again once the probe reached Kafka');
    await queue.shutdown();
  });

  it('bounds pending bytes, but admits a lone request of any size', async () => {
    const kafka = new FakeKafka();
    const queue = await queueWith(kafka, { maxPendingBytes: 50_000 });
    kafka.mode = 'hang';
    const big = queue.publish([message('a', 80_000)], []);
    assert.equal(status(await queue.publish([message('b', 100)], [])), 429);
    kafka.mode = 'ok';
    for (const send of kafka.sends) send.resolve();
    assert.equal(status(await big), 200);
    assert.equal(status(await queue.publish([message('b', 100)], [])), 200);
    await queue.shutdown();
  });
});
