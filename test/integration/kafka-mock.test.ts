import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajs, { type Consumer, type Kafka, type Producer } from 'kafkajs';
import { kafkaForTests, randomTopic, startKafkaMock, testConsumerConfig, type KafkaMock } from '../support/kafka-mock.ts';

// kafkajs is CommonJS and spreads its error classes into module.exports: Node sees them on the default export only.
const { KafkaJSError } = kafkajs;

/** Rejects when `promise` has not settled within `ms`: a hang becomes a test failure, not a stuck run. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still pending after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Reads `topic` from the beginning with a fresh consumer group until `expected` messages arrived, resolving
 * offsets message by message and committing them before it returns. Returns key -> value.
 */
async function consumeAll(
  kafka: Kafka,
  topic: string,
  expected: number,
  track: (c: Consumer) => void,
): Promise<{ seen: Map<string, string>; groupId: string }> {
  const groupId = randomTopic('group');
  const consumer = kafka.consumer(testConsumerConfig(groupId));
  track(consumer);
  const seen = new Map<string, string>();
  let duplicates = 0;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const done = new Promise<void>((resolve, reject) => {
    consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
    consumer
      .run({
        eachBatchAutoResolve: false,
        autoCommitThreshold: 1,
        eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary, heartbeat, isRunning, isStale }) => {
          for (const message of batch.messages) {
            if (!isRunning() || isStale()) break;
            const key = message.key?.toString() ?? '<null>';
            if (seen.has(key)) duplicates++;
            seen.set(key, message.value?.toString() ?? '<null>');
            resolveOffset(message.offset);
          }
          await commitOffsetsIfNecessary();
          await heartbeat();
          if (seen.size >= expected) resolve();
        },
      })
      .catch(reject);
  });
  try {
    await within(done, 20_000, `consuming ${expected} messages from ${topic} (got ${seen.size})`);
  } finally {
    await consumer.disconnect();
  }
  assert.equal(duplicates, 0, 'no message was delivered twice');
  return { seen, groupId };
}

function messages(prefix: string, from: number, count: number): { key: string; value: string }[] {
  return Array.from({ length: count }, (_, i) => ({ key: `${prefix}-${from + i}`, value: JSON.stringify({ n: from + i, prefix }) }));
}

function assertAll(seen: Map<string, string>, expected: { key: string; value: string }[]): void {
  assert.equal(seen.size, expected.length);
  for (const { key, value } of expected) assert.equal(seen.get(key), value, `message ${key}`);
}

describe('librdkafka mock cluster with kafkajs', () => {
  let mock: KafkaMock;
  let kafka: Kafka;
  const producers: Producer[] = [];
  const consumers: Consumer[] = [];

  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
    kafka = kafkaForTests(mock.brokers);
  });

  after(async () => {
    await Promise.allSettled([...producers, ...consumers].map((c) => c.disconnect()));
    await mock?.stop();
  });

  it('numbers brokers 1..n and reports command errors', async () => {
    assert.equal(mock.brokers.length, 3);
    assert.deepEqual(mock.brokerIds, [1, 2, 3]);
    const admin = kafka.admin();
    await admin.connect();
    try {
      const cluster = await admin.describeCluster();
      assert.deepEqual(cluster.brokers.map((b) => b.nodeId).sort(), [1, 2, 3]);
      assert.deepEqual(cluster.brokers.map((b) => `${b.host}:${b.port}`).sort(), [...mock.brokers].sort());

      const topic = randomTopic('cmd');
      await mock.createTopic(topic, 2);
      await assert.rejects(mock.createTopic(topic, 2), /TOPIC_ALREADY_EXISTS/);
      assert.notEqual(randomTopic('x'), randomTopic('x'));
      await assert.rejects(mock.brokerDown(0), RangeError);
      await assert.rejects(mock.setRtt(4, 10), RangeError);

      const [metadata] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
      assert.equal(metadata?.partitions.length, 2);

      // A slow broker: every request to any broker now takes at least the round-trip time.
      for (const id of mock.brokerIds) await mock.setRtt(id, 300);
      const started = Date.now();
      await admin.fetchTopicOffsets(topic);
      assert.ok(Date.now() - started >= 300, `fetchTopicOffsets took ${Date.now() - started} ms`);
      for (const id of mock.brokerIds) await mock.setRtt(id, 0);
    } finally {
      await admin.disconnect();
    }
  });

  it('carries 2000 messages over 6 partitions through a consumer group with manual offsets', async () => {
    const topic = randomTopic('roundtrip');
    await mock.createTopic(topic, 6);
    const producer = kafka.producer();
    producers.push(producer);
    await producer.connect();
    const sent = messages('k', 0, 2000);
    const partitions = new Set<number>();
    for (let i = 0; i < sent.length; i += 500) {
      const records = await producer.send({ topic, acks: -1, messages: sent.slice(i, i + 500) });
      for (const r of records) partitions.add(r.partition);
    }
    assert.deepEqual([...partitions].sort(), [0, 1, 2, 3, 4, 5], 'keys spread over every partition');

    const { seen, groupId } = await consumeAll(kafka, topic, sent.length, (c) => consumers.push(c));
    assertAll(seen, sent);

    const admin = kafka.admin();
    await admin.connect();
    try {
      const ends = await admin.fetchTopicOffsets(topic);
      assert.equal(
        ends.reduce((sum, p) => sum + Number(p.high), 0),
        2000,
      );
      // The group committed exactly up to the end of every partition.
      const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
      const committedByPartition = new Map(committed?.partitions.map((p) => [p.partition, p.offset]));
      for (const end of ends) assert.equal(committedByPartition.get(end.partition), end.high, `partition ${end.partition}`);
    } finally {
      await admin.disconnect();
    }
  });

  it('fails sends fast while every broker is down, and keeps the data across the outage', async () => {
    const topic = randomTopic('outage');
    await mock.createTopic(topic, 3);
    const producer = kafka.producer({ retry: { retries: 1, initialRetryTime: 100, maxRetryTime: 300 } });
    producers.push(producer);
    await producer.connect();
    const before = messages('before', 0, 300);
    await producer.send({ topic, acks: -1, messages: before });

    await mock.allDown();
    const started = Date.now();
    const error: unknown = await within(
      producer.send({ topic, acks: -1, messages: messages('lost', 0, 1) }).then(
        () => assert.fail('send succeeded while every broker was down'),
        (e: unknown) => e,
      ),
      10_000,
      'send during the outage',
    );
    assert.ok(error instanceof KafkaJSError, `a kafkajs error, got ${String(error)}`);
    assert.match(error.message, /ECONNREFUSED|Connection|broker/i);
    const elapsed = Date.now() - started;
    assert.ok(elapsed < 10_000, `rejected after ${elapsed} ms`);

    await mock.allUp();
    const afterOutage = messages('after', 0, 50);
    await within(producer.send({ topic, acks: -1, messages: afterOutage }), 10_000, 'send after the outage');

    const { seen } = await consumeAll(kafka, topic, before.length + afterOutage.length, (c) => consumers.push(c));
    assertAll(seen, [...before, ...afterOutage]);
  });
});
