/**
 * KafkaSource against a scripted stand-in for a kafkajs consumer and a writer whose INSERTs ClickHouse acknowledges
 * when the test says, for what the real mock cluster shows only by chance: acknowledgements out of order, commits the
 * group refuses during a rebalance, backpressure, and SIGTERM landing while writes are in flight or a crashed consumer
 * is replaced. The errors are kafkajs's own classes, wrapped the way its retries wrap them.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, it } from 'node:test';
import type { Consumer, ConsumerConfig, ConsumerRunConfig, EachBatchPayload, Kafka } from 'kafkajs';
import { createLogger } from '../../common/index.ts';
import { encodeOtlpProtobuf } from '../../contract/index.ts';
import { ConfigError } from '../../common/errors.ts';
import { stopWithin } from '../../common/index.ts';
import { commitRefusal, crashReason, KafkaSource } from '../../pipeline/kafka-source.ts';
import type { EncodedRows } from '../../pipeline/encode.ts';
import { loadConfig } from '../../common/index.ts';
import { createPipelineMetrics, pipelineConfigSchema, type PipelineMetrics, type SpanWriter } from '../../pipeline/index.ts';
import { holdRequest, holdSpan, nowNs } from '../support/fuzz-otlp.ts';

const require = createRequire(import.meta.url);
type ErrorClass = new (e: unknown, options?: unknown) => Error;
const kafkajsErrors = require('kafkajs/src/errors') as Record<string, ErrorClass> & { isRebalancing: (e: unknown) => boolean };
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as { createErrorFromCode: (code: number) => unknown };
const { KafkaJSProtocolError, KafkaJSNonRetriableError, KafkaJSNumberOfRetriesExceeded, KafkaJSConnectionError } = kafkajsErrors as Record<
  string,
  ErrorClass
>;

const CODES = {
  REBALANCE_IN_PROGRESS: 27,
  ILLEGAL_GENERATION: 22,
  UNKNOWN_MEMBER_ID: 25,
  NOT_COORDINATOR_FOR_GROUP: 16,
  GROUP_COORDINATOR_NOT_AVAILABLE: 15,
  OFFSET_METADATA_TOO_LARGE: 12,
};
const protocolError = (code: number): Error => new (KafkaJSProtocolError as ErrorClass)(createErrorFromCode(code));
/** What consumer.commitOffsets rejects with when the group refuses a commit: kafkajs's retrier wraps the protocol error. */
const asCommitFailure = (error: Error & { retriable?: boolean }): Error =>
  error.retriable
    ? new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(error, { retryCount: 5, retryTime: 1000 })
    : new (KafkaJSNonRetriableError as ErrorClass)(error, { cause: error });

const log = createLogger('test', 'silent');
const tick = () => new Promise((resolve) => setImmediate(resolve));
const gate = () => {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
};

/** The parts of a kafkajs consumer KafkaSource uses, each step recorded and, where a test needs it, held at a gate. */
class FakeConsumer {
  readonly events = { GROUP_JOIN: 'consumer.group_join', REBALANCING: 'consumer.rebalancing', CRASH: 'consumer.crash' };
  readonly calls: string[] = [];
  runConfig: ConsumerRunConfig | undefined;
  connectGate: Promise<void> = Promise.resolve();
  disconnectGate: Promise<void> = Promise.resolve();
  commit: (offsets: unknown) => Promise<void> = async () => undefined;
  /** Every commit asked for, taken or not. */
  readonly committed: unknown[] = [];
  private readonly listeners = new Map<string, ((event: { payload: unknown }) => void)[]>();

  constructor(readonly config: ConsumerConfig) {}

  on(name: string, listener: (event: { payload: unknown }) => void): () => void {
    this.listeners.set(name, [...(this.listeners.get(name) ?? []), listener]);
    return () => undefined;
  }
  emit(name: string, payload: unknown): void {
    for (const listener of this.listeners.get(name) ?? []) listener({ payload });
  }
  async connect(): Promise<void> {
    this.calls.push('connect');
    await this.connectGate;
  }
  async subscribe(): Promise<void> {
    this.calls.push('subscribe');
  }
  async run(config: ConsumerRunConfig): Promise<void> {
    this.calls.push('run');
    this.runConfig = config;
  }
  commitOffsets(offsets: unknown): Promise<void> {
    this.calls.push('commit');
    this.committed.push(offsets);
    return this.commit(offsets);
  }
  /** Like kafkajs's: only a running consumer can pause. */
  pause(): void {
    if (!this.runConfig) throw new Error('Consumer group was not initialized, consumer#run must be called first');
    this.calls.push('pause');
  }
  async disconnect(): Promise<void> {
    this.calls.push('disconnect');
    await this.disconnectGate;
  }
}

/** A writer whose writes are acknowledged (or refused, as after its shutdown) when the test says, in any order. */
function scriptedWriter() {
  const writes: { rows: number; ack: () => void; refuse: () => void }[] = [];
  const writer = {
    rowEncoding: 'Native',
    write: (rows: EncodedRows) =>
      new Promise<void>((resolve, reject) =>
        writes.push({ rows: rows.rows, ack: resolve, refuse: () => reject(new Error('writer stopped')) }),
      ),
  } as unknown as SpanWriter;
  return { writer, writes };
}

function setup(
  prepare: (consumer: FakeConsumer, index: number) => void = () => undefined,
  options: { maxInFlightBytes?: number; heartbeatIntervalMs?: number } = {},
) {
  const consumers: FakeConsumer[] = [];
  const kafka = {
    consumer: (config: ConsumerConfig) => {
      const consumer = new FakeConsumer(config);
      prepare(consumer, consumers.length);
      consumers.push(consumer);
      return consumer as unknown as Consumer;
    },
  } as unknown as Kafka;
  const metrics: PipelineMetrics = createPipelineMetrics();
  const { writer, writes } = scriptedWriter();
  const source = new KafkaSource({
    kafka,
    groupId: 'g',
    topics: ['t'],
    writer,
    metrics,
    log,
    partitionsConsumedConcurrently: 2,
    sessionTimeoutMs: 6000,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? 1000,
    rebalanceTimeoutMs: 12_000,
    maxBytesPerPartition: 1 << 20,
    restartDelayMs: 5,
    maxInFlightBytes: options.maxInFlightBytes,
  });
  return { source, consumers, metrics, writes };
}

const counter = async (metrics: PipelineMetrics, name: keyof PipelineMetrics, labels: Record<string, string> = {}) => {
  const values = (await (metrics[name] as { get(): Promise<{ values: { value: number; labels: Record<string, unknown> }[] }> }).get())
    .values;
  return values.filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l)).reduce((sum, v) => sum + v.value, 0);
};

/** A message holding one valid pd.hold span: rows to write. (A null value is an undecodable message: no rows.) */
const spanMessage = (): Buffer =>
  Buffer.from(encodeOtlpProtobuf(holdRequest([holdSpan('r-1', '00f067aa0ba902b7', '4bf92f3577b34da6a3ce929d0e0e4736', nowNs())])));

/**
 * Starts the source's eachBatch on a one-message batch at `offset` of `partition`: what it resolved so far, how it
 * ended once it did, and the heartbeats it sent.
 */
function startBatch(
  consumer: FakeConsumer,
  offset = '41',
  options: { partition?: number; value?: Buffer | null; headers?: Record<string, Buffer>; heartbeat?: () => Promise<void> } = {},
) {
  const resolved: string[] = [];
  let heartbeats = 0;
  const payload = {
    batch: {
      topic: 't',
      partition: options.partition ?? 3,
      messages: [{ value: options.value ?? null, offset, headers: options.headers }],
      lastOffset: () => offset,
    },
    heartbeat: () => {
      heartbeats++;
      return options.heartbeat?.() ?? Promise.resolve();
    },
    isRunning: () => true,
    isStale: () => false,
    resolveOffset: (offset: string) => resolved.push(offset),
  } as unknown as EachBatchPayload;
  const eachBatch = consumer.runConfig?.eachBatch;
  assert.ok(eachBatch, 'the consumer runs with eachBatch');
  const outcome = eachBatch(payload).then(
    () => ({ ok: true as const }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  return { resolved, outcome, heartbeats: () => heartbeats };
}

/** Runs eachBatch to its end (which, unless it waits for room, does not wait for ClickHouse). */
async function runBatch(
  consumer: FakeConsumer,
  offset = '41',
  options: { partition?: number; value?: Buffer | null; headers?: Record<string, Buffer> } = {},
) {
  const started = startBatch(consumer, offset, options);
  return { resolved: started.resolved, outcome: await started.outcome };
}

/** A started source whose consumer ran these batches (offset, partition), each handed to the writer. */
async function startWithBatches(
  batches: readonly (readonly [string, number])[],
  prepare: (consumer: FakeConsumer) => void = () => undefined,
) {
  const context = setup();
  await context.source.start();
  const consumer = context.consumers[0] as FakeConsumer;
  prepare(consumer);
  for (const [offset, partition] of batches) await runBatch(consumer, offset, { partition });
  return { ...context, consumer };
}

/** Lets acknowledgements, commits and their callbacks run. */
const settle = async () => {
  for (let i = 0; i < 5; i++) await tick();
};

describe('commitRefusal: which failed commits are the group refusing them', () => {
  it('finds the protocol error under the wrappers kafkajs retries put around it, by its type', () => {
    for (const [type, code] of Object.entries(CODES)) {
      const bare = protocolError(code);
      const refusal = commitRefusal(asCommitFailure(bare));
      if (type === 'OFFSET_METADATA_TOO_LARGE') {
        assert.equal(refusal, undefined, 'a protocol error that is no refusal');
        continue;
      }
      assert.ok(refusal, type);
      assert.equal(refusal.type, type);
      assert.equal(refusal.error, bare, 'the bare protocol error, not the wrapper');
      assert.equal(refusal.rejoin, type !== 'GROUP_COORDINATOR_NOT_AVAILABLE', `${type}: rejoin`);
    }
  });

  it('is nothing for a commit that failed for another reason', () => {
    const connection = new (KafkaJSConnectionError as ErrorClass)('Connection error: ECONNREFUSED', { broker: '127.0.0.1:1' });
    assert.equal(commitRefusal(new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(connection, { retryCount: 5, retryTime: 1 })), undefined);
    assert.equal(commitRefusal(new Error('The group is rebalancing, so a rejoin is needed')), undefined, 'never by message text');
    assert.equal(commitRefusal(undefined), undefined);
  });

  it('hands kafkajs an error its consumer loop rejoins on, where the wrapper would crash the consumer', () => {
    const wrapped = asCommitFailure(protocolError(CODES.REBALANCE_IN_PROGRESS));
    assert.equal(kafkajsErrors.isRebalancing(wrapped), false, 'the wrapper kafkajs itself does not recognise');
    assert.equal(kafkajsErrors.isRebalancing(commitRefusal(wrapped)?.error), true);
  });
});

describe("crashReason: the restart counter's label", () => {
  it("is the protocol error type under the wrappers, else the innermost error's name", () => {
    const invalid = protocolError(42);
    assert.equal(crashReason(new (KafkaJSNonRetriableError as ErrorClass)(invalid, { cause: invalid })), 'INVALID_REQUEST');
    const connection = new (KafkaJSConnectionError as ErrorClass)('Connection error');
    assert.equal(
      crashReason(new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(connection, { retryCount: 5, retryTime: 1 })),
      'KafkaJSConnectionError',
    );
    assert.equal(crashReason(new TypeError('x')), 'TypeError');
    assert.equal(crashReason(undefined), 'unknown');
  });
});

describe('KafkaSource', () => {
  it('passes the rebalance timeout to the consumer', async () => {
    const { source, consumers } = setup();
    await source.start();
    assert.equal(consumers[0]?.config.rebalanceTimeout, 12_000);
    assert.equal(consumers[0]?.config.sessionTimeout, 6000);
    await source.shutdown();
  });

  it('moves the fetch position past a batch at once, and commits its offset once ClickHouse acknowledged its rows', async () => {
    const { source, consumers, metrics, writes } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    const { resolved, outcome } = await runBatch(consumer, '41', { value: spanMessage() });
    assert.deepEqual(outcome, { ok: true }, 'the batch ends before ClickHouse answers');
    assert.deepEqual(resolved, ['41']);
    assert.equal(writes.length, 1);
    assert.equal(writes[0]?.rows, 1);
    await settle();
    assert.deepEqual(consumer.committed, [], 'nothing committed before the acknowledgement');
    writes[0]?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 3, offset: '42' }]]);
    assert.equal(await counter(metrics, 'commits'), 1);
    assert.equal(await counter(metrics, 'inFlightBytes'), 0);
    await source.shutdown();
  });

  it("decodes each message by the encoding its headers declare (kafkajs's Buffers)", async () => {
    const { source, consumers, metrics, writes } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    const header = (value: string) => Buffer.from(value);
    await runBatch(consumer, '41', {
      value: spanMessage(),
      headers: { 'content-type': header('application/x-protobuf'), 'holdscope-encoding': header('otlp_proto') },
    });
    // The same protobuf value declared JSON: undecodable as declared, never decoded by a guess.
    await runBatch(consumer, '42', { value: spanMessage(), headers: { 'content-type': header('application/json') } });
    assert.deepEqual(
      writes.map((w) => w.rows),
      [1, 0],
    );
    assert.equal(await counter(metrics, 'undecodable'), 1);
    for (const w of writes) w.ack();
    await source.shutdown();
  });

  it('acknowledgements out of order across batches of one partition never commit past an unacknowledged batch', async () => {
    const { source, consumer, writes } = await startWithBatches([
      ['10', 3],
      ['20', 3],
      ['30', 3],
      ['5', 4],
    ]);
    const [p3at10, p3at20, p3at30, p4at5] = writes;
    p3at30?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [], 'batch 30 is stored, 10 and 20 are not');
    p4at5?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 4, offset: '6' }]], 'another partition is not held up');
    p3at20?.ack();
    await settle();
    assert.equal(consumer.committed.length, 1, 'batch 10 is still not stored');
    p3at10?.ack();
    await settle();
    assert.deepEqual(consumer.committed[1], [{ topic: 't', partition: 3, offset: '31' }], 'one commit past all three');
    await source.shutdown();
  });

  it('one commit at a time: the next carries the latest stored offset of every partition', async () => {
    const slowCommit = gate();
    const { source, consumer, metrics, writes } = await startWithBatches(
      [
        ['10', 3],
        ['20', 3],
        ['30', 3],
        ['5', 4],
      ],
      (c) => {
        c.commit = () => slowCommit.opened;
      },
    );
    writes[0]?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 3, offset: '11' }]]);
    for (const write of writes.slice(1)) write.ack();
    await settle();
    assert.equal(consumer.committed.length, 1, 'waits for the commit in flight');
    slowCommit.open();
    await settle();
    assert.deepEqual(consumer.committed[1], [
      { topic: 't', partition: 3, offset: '31' },
      { topic: 't', partition: 4, offset: '6' },
    ]);
    assert.equal(await counter(metrics, 'commits'), 2);
    await source.shutdown();
  });

  it('a write refused (the writer stopped) keeps its offset and every later one of its partition uncommitted', async () => {
    const { source, consumer, writes } = await startWithBatches([
      ['10', 3],
      ['20', 3],
      ['5', 4],
    ]);
    writes[0]?.refuse();
    writes[1]?.ack();
    writes[2]?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 4, offset: '6' }]]);
    await runBatch(consumer, '30', { partition: 3 });
    writes[3]?.ack();
    await settle();
    assert.equal(consumer.committed.length, 1, 'nor any batch of the partition handed after it');
    await source.shutdown();
  });

  it('a rebalance drops the offsets of what was handed before it: the partition is read again from its committed offset', async () => {
    const { source, consumers, writes } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    await runBatch(consumer, '10');
    consumer.emit(consumer.events.REBALANCING, {});
    writes[0]?.ack();
    await settle();
    consumer.emit(consumer.events.GROUP_JOIN, {});
    await runBatch(consumer, '20');
    writes[1]?.ack();
    await settle();
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 3, offset: '21' }]], 'only what was handed in the new generation');
    await source.shutdown();
  });

  it('past maxInFlightBytes a batch waits, undecoded, unresolved and heartbeating, until a write is acknowledged', async () => {
    const { source, consumers, metrics, writes } = setup(undefined, { maxInFlightBytes: 1, heartbeatIntervalMs: 5 });
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    await runBatch(consumer, '10', { value: spanMessage() });
    const bytes = await counter(metrics, 'inFlightBytes');
    assert.ok(bytes > 100, `the first batch's rows are in flight (${bytes} bytes)`);
    const second = startBatch(consumer, '20', { value: spanMessage() });
    await new Promise((resolve) => setTimeout(resolve, 40));
    assert.equal(writes.length, 1, 'the second batch is not handed to the writer');
    assert.deepEqual(second.resolved, []);
    assert.ok(second.heartbeats() >= 2, `it heartbeats while it waits (${second.heartbeats()})`);
    assert.match(source.status(), /1 batch in hand; 1 written .* awaiting ClickHouse/);
    writes[0]?.ack();
    assert.deepEqual(await second.outcome, { ok: true });
    assert.deepEqual(second.resolved, ['20']);
    assert.equal(writes.length, 2);
    assert.equal(await counter(metrics, 'inFlightBytes'), bytes);
    writes[1]?.ack();
    await source.shutdown();
  });

  it('a heartbeat that finds the group rebalancing ends the wait for room with the bare protocol error, so kafkajs rejoins', async () => {
    const { source, consumers, writes } = setup(undefined, { maxInFlightBytes: 1, heartbeatIntervalMs: 5 });
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    await runBatch(consumer, '10', { value: spanMessage() });
    const bare = protocolError(CODES.REBALANCE_IN_PROGRESS);
    const waiting = startBatch(consumer, '20', { value: spanMessage(), heartbeat: () => Promise.reject(asCommitFailure(bare)) });
    const outcome = await waiting.outcome;
    assert.equal(!outcome.ok && outcome.error, bare);
    assert.deepEqual(waiting.resolved, []);
    assert.equal(writes.length, 1);
    writes[0]?.ack();
    await source.shutdown();
  });

  it('a commit refused in a rebalance is counted and answered by rejoining: no crash, no restart, the batches read again', async () => {
    const { source, consumers, metrics, writes } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    for (const type of ['REBALANCE_IN_PROGRESS', 'ILLEGAL_GENERATION', 'UNKNOWN_MEMBER_ID', 'NOT_COORDINATOR_FOR_GROUP'] as const) {
      const bare = protocolError(CODES[type]);
      consumer.commit = () => Promise.reject(asCommitFailure(bare));
      await runBatch(consumer, '41');
      writes.at(-1)?.ack();
      await settle();
      assert.equal(await counter(metrics, 'commitsRefused', { reason: type }), 1, type);
      const { resolved, outcome } = await runBatch(consumer, '42');
      assert.equal(outcome.ok, false, `${type}: the next batch ends so kafkajs rejoins`);
      assert.equal(!outcome.ok && outcome.error, bare, `${type}: with the bare protocol error, which kafkajs's loop handles by rejoining`);
      assert.deepEqual(resolved, [], `${type}: and stays unresolved`);
      // kafkajs rejoins: a new generation, which consumes again from the committed offset.
      consumer.emit(consumer.events.REBALANCING, {});
      consumer.emit(consumer.events.GROUP_JOIN, {});
      consumer.commit = async () => undefined;
      assert.deepEqual((await runBatch(consumer, '41')).outcome, { ok: true }, `${type}: consuming again after the rejoin`);
      writes.at(-1)?.ack();
      await settle();
    }
    assert.equal(await counter(metrics, 'commits'), 4);
    assert.equal(await counter(metrics, 'consumerRestarts'), 0);
    assert.equal(consumers.length, 1, 'no new consumer');
    await source.shutdown();
  });

  it('a commit refused while the coordinator moves, or failed otherwise, is counted or logged, and the next commit carries its offsets', async () => {
    const connection = new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(new (KafkaJSConnectionError as ErrorClass)('Connection error'), {
      retryCount: 5,
      retryTime: 1,
    });
    for (const failure of [asCommitFailure(protocolError(CODES.GROUP_COORDINATOR_NOT_AVAILABLE)), connection]) {
      const { source, consumers, metrics, writes } = setup();
      await source.start();
      const consumer = consumers[0] as FakeConsumer;
      consumer.commit = () => Promise.reject(failure);
      await runBatch(consumer, '10', { partition: 3 });
      writes[0]?.ack();
      await settle();
      consumer.commit = async () => undefined;
      assert.deepEqual((await runBatch(consumer, '5', { partition: 4 })).outcome, { ok: true }, 'consuming carries on');
      writes[1]?.ack();
      await settle();
      assert.deepEqual(consumer.committed[1], [
        { topic: 't', partition: 3, offset: '11' },
        { topic: 't', partition: 4, offset: '6' },
      ]);
      assert.equal(await counter(metrics, 'commitsRefused', { reason: 'GROUP_COORDINATOR_NOT_AVAILABLE' }), failure === connection ? 0 : 1);
      assert.equal(await counter(metrics, 'commits'), 1);
      await source.shutdown();
    }
  });

  it('SIGTERM with writes in flight: stops fetching, waits for ClickHouse, commits what was stored, then leaves the group', async () => {
    const { source, consumers, writes } = setup(undefined, { maxInFlightBytes: 1, heartbeatIntervalMs: 5 });
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    await runBatch(consumer, '5', { partition: 4 });
    await runBatch(consumer, '10', { value: spanMessage() });
    const waiting = startBatch(consumer, '20', { value: spanMessage() });
    let stopped = false;
    const stopping = source.shutdown().then(() => (stopped = true));
    assert.deepEqual(await waiting.outcome, { ok: true }, 'a batch waiting for room ends');
    assert.deepEqual(waiting.resolved, [], 'unresolved: it is read again');
    assert.equal(writes.length, 2);
    await settle();
    assert.ok(consumer.calls.includes('pause'), 'fetching stopped');
    assert.equal(stopped, false, 'waits for the writes in flight');
    assert.match(source.status(), /2 written .* awaiting ClickHouse/);
    writes[0]?.refuse();
    writes[1]?.ack();
    await stopping;
    assert.deepEqual(consumer.calls.slice(-3), ['pause', 'commit', 'disconnect']);
    assert.deepEqual(consumer.committed, [[{ topic: 't', partition: 3, offset: '11' }]], 'what was stored, not what was refused');
    assert.equal(source.status(), 'stopped; 0 batches in hand');
  });

  it('replaces a consumer that crashed for good, but not one kafkajs restarts itself', async () => {
    const { source, consumers, metrics } = setup();
    await source.start();
    const first = consumers[0] as FakeConsumer;
    first.emit(first.events.CRASH, { error: new Error('retriable'), restart: true });
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(consumers.length, 1);
    const syncRejected = protocolError(42);
    first.emit(first.events.CRASH, { error: syncRejected, restart: false });
    first.emit(first.events.CRASH, { error: syncRejected, restart: false }); // the same crash, told twice
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(consumers.length, 2, 'one new consumer');
    assert.deepEqual(first.calls, ['connect', 'subscribe', 'run', 'disconnect']);
    assert.deepEqual(consumers[1]?.calls, ['connect', 'subscribe', 'run']);
    assert.equal(await counter(metrics, 'consumerRestarts', { reason: 'INVALID_REQUEST' }), 1);
    await source.shutdown();
    assert.deepEqual(consumers[1]?.calls, ['connect', 'subscribe', 'run', 'pause', 'disconnect']);
  });

  it('SIGTERM while a crashed consumer is being disconnected: no new consumer, and shutdown ends', async () => {
    const slowDisconnect = gate();
    const { source, consumers } = setup((consumer, index) => {
      if (index === 0) consumer.disconnectGate = slowDisconnect.opened;
    });
    await source.start();
    const first = consumers[0] as FakeConsumer;
    first.emit(first.events.CRASH, { error: new Error('sync failed'), restart: false });
    while (!first.calls.includes('disconnect')) await new Promise((resolve) => setTimeout(resolve, 2));
    let stopped = false;
    const stopping = source.shutdown().then(() => (stopped = true));
    await tick();
    assert.equal(stopped, false, 'shutdown waits for the restart in progress');
    slowDisconnect.open();
    await stopping;
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(consumers.length, 1, 'the restart saw the shutdown and created no consumer');
  });

  it('SIGTERM while a restart is only scheduled: the restart never happens', async () => {
    const { source, consumers } = setup();
    await source.start();
    const first = consumers[0] as FakeConsumer;
    first.emit(first.events.CRASH, { error: new Error('sync failed'), restart: false });
    await source.shutdown();
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(consumers.length, 1);
  });

  it('SIGTERM while the consumer connects: it joins no group and is disconnected once the connect returns', async () => {
    const slowConnect = gate();
    const { source, consumers } = setup((consumer) => {
      consumer.connectGate = slowConnect.opened;
    });
    const starting = source.start();
    await tick();
    let stopped = false;
    const stopping = source.shutdown().then(() => (stopped = true));
    await tick();
    assert.equal(stopped, false, 'shutdown waits for the connect');
    assert.match(source.status(), /connecting/);
    slowConnect.open();
    await Promise.all([starting, stopping]);
    assert.deepEqual(consumers[0]?.calls, ['connect', 'disconnect']);
    assert.equal(source.status(), 'stopped; 0 batches in hand');
  });
});

describe('pipeline configuration and stopping', () => {
  it('defaults the rebalance timeout and the shutdown deadline, and validates them as flags', () => {
    const config = loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092' }, {});
    assert.equal(config.rebalanceTimeoutMs, 20_000);
    assert.equal(config.shutdownTimeoutMs, 30_000);
    assert.equal(config.partitionsConsumedConcurrently, 8);
    assert.equal(config.maxInFlightBytes, 24 * 2 ** 20);
    assert.equal(
      loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', rebalanceTimeoutMs: '12000', shutdownTimeoutMs: '5000' }, {})
        .rebalanceTimeoutMs,
      12_000,
    );
    assert.throws(
      () => loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', shutdownTimeoutMs: '-1' }, {}),
      (error: Error) => error instanceof ConfigError && /--shutdown-timeout-ms/.test(error.message),
    );
    assert.throws(
      () => loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', rebalanceTimeoutMs: 'soon' }, {}),
      (error: Error) => error instanceof ConfigError && /--rebalance-timeout-ms/.test(error.message),
    );
  });

  it('stopWithin gives up at the deadline and says what the stop still waited for', async () => {
    const hung = await stopWithin(50, async (waitingFor) => {
      waitingFor.add(() => 'the Kafka consumer to leave the group (joining the group)');
      const done = () => 'the lag monitor';
      waitingFor.add(done);
      waitingFor.delete(done);
      await new Promise(() => undefined);
    });
    assert.deepEqual(hung, { stopped: false, waitingFor: ['the Kafka consumer to leave the group (joining the group)'] });
    assert.deepEqual(await stopWithin(5000, async () => undefined), { stopped: true });
    await assert.rejects(
      stopWithin(5000, async () => {
        throw new Error('disconnect failed');
      }),
      /disconnect failed/,
    );
  });
});
