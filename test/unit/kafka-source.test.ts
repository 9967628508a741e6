/**
 * KafkaSource against a scripted stand-in for a kafkajs consumer, for what the real mock cluster shows only by
 * chance: commits the group refuses during a rebalance, and SIGTERM landing while a crashed consumer is replaced.
 * The errors are kafkajs's own classes, wrapped the way its retries wrap them.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, it } from 'node:test';
import type { Consumer, ConsumerConfig, ConsumerRunConfig, EachBatchPayload, Kafka } from 'kafkajs';
import { createLogger } from '../../common/index.ts';
import { ConfigError } from '../../common/errors.ts';
import { stopWithin } from '../../cli/pipeline.ts';
import { commitRefusal, crashReason, KafkaSource } from '../../pipeline/kafka-source.ts';
import { createPipelineMetrics, loadConfig, pipelineConfigSchema, type PipelineMetrics, type SpanWriter } from '../../pipeline/index.ts';

const require = createRequire(import.meta.url);
type ErrorClass = new (e: unknown, options?: unknown) => Error;
const kafkajsErrors = require('kafkajs/src/errors') as Record<string, ErrorClass> & { isRebalancing: (e: unknown) => boolean };
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as { createErrorFromCode: (code: number) => unknown };
const { KafkaJSProtocolError, KafkaJSNonRetriableError, KafkaJSNumberOfRetriesExceeded, KafkaJSConnectionError } = kafkajsErrors as Record<string, ErrorClass>;

const CODES = { REBALANCE_IN_PROGRESS: 27, ILLEGAL_GENERATION: 22, UNKNOWN_MEMBER_ID: 25, NOT_COORDINATOR_FOR_GROUP: 16, GROUP_COORDINATOR_NOT_AVAILABLE: 15, OFFSET_METADATA_TOO_LARGE: 12 };
const protocolError = (code: number): Error => new (KafkaJSProtocolError as ErrorClass)(createErrorFromCode(code));
/** What consumer.commitOffsets rejects with when the group refuses a commit: kafkajs's retrier wraps the protocol error. */
const asCommitFailure = (error: Error & { retriable?: boolean }): Error =>
  error.retriable ? new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(error, { retryCount: 5, retryTime: 1000 }) : new (KafkaJSNonRetriableError as ErrorClass)(error, { cause: error });

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
    return this.commit(offsets);
  }
  async disconnect(): Promise<void> {
    this.calls.push('disconnect');
    await this.disconnectGate;
  }
}

function setup(prepare: (consumer: FakeConsumer, index: number) => void = () => undefined) {
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
  const writer = { write: async () => undefined } as unknown as SpanWriter;
  const source = new KafkaSource({
    kafka,
    groupId: 'g',
    topics: ['t'],
    writer,
    metrics,
    log,
    partitionsConsumedConcurrently: 2,
    sessionTimeoutMs: 6000,
    heartbeatIntervalMs: 1000,
    rebalanceTimeoutMs: 12_000,
    maxBytesPerPartition: 1 << 20,
    restartDelayMs: 5,
  });
  return { source, consumers, metrics };
}

const counter = async (metrics: PipelineMetrics, name: keyof PipelineMetrics, labels: Record<string, string> = {}) => {
  const values = (await (metrics[name] as { get(): Promise<{ values: { value: number; labels: Record<string, unknown> }[] }> }).get()).values;
  return values.filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l)).reduce((sum, v) => sum + v.value, 0);
};

/** Runs the source's eachBatch on a one-message batch at `offset`; says what it resolved and how it ended. */
async function runBatch(consumer: FakeConsumer, offset = '41') {
  const resolved: string[] = [];
  const payload = {
    batch: { topic: 't', partition: 3, messages: [{ value: null, offset }], lastOffset: () => offset },
    heartbeat: async () => undefined,
    isRunning: () => true,
    isStale: () => false,
    resolveOffset: (offset: string) => resolved.push(offset),
  } as unknown as EachBatchPayload;
  const eachBatch = consumer.runConfig?.eachBatch;
  assert.ok(eachBatch, 'the consumer runs with eachBatch');
  const outcome = await eachBatch(payload).then(
    () => ({ ok: true as const }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  return { resolved, outcome };
}

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

describe('crashReason: the restart counter\'s label', () => {
  it('is the protocol error type under the wrappers, else the innermost error\'s name', () => {
    const invalid = protocolError(42);
    assert.equal(crashReason(new (KafkaJSNonRetriableError as ErrorClass)(invalid, { cause: invalid })), 'INVALID_REQUEST');
    const connection = new (KafkaJSConnectionError as ErrorClass)('Connection error');
    assert.equal(crashReason(new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(connection, { retryCount: 5, retryTime: 1 })), 'KafkaJSConnectionError');
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

  it('commits after the rows are stored, then moves the fetch position past the batch', async () => {
    const { source, consumers, metrics } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    let committed: unknown;
    consumer.commit = async (offsets) => {
      committed = offsets;
    };
    const { resolved, outcome } = await runBatch(consumer);
    assert.deepEqual(outcome, { ok: true });
    assert.deepEqual(committed, [{ topic: 't', partition: 3, offset: '42' }]);
    assert.deepEqual(resolved, ['41']);
    assert.equal(await counter(metrics, 'commits'), 1);
    await source.shutdown();
  });

  it('a commit refused in a rebalance is counted and answered by rejoining: no crash, no restart, the batch read again', async () => {
    const { source, consumers, metrics } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    for (const type of ['REBALANCE_IN_PROGRESS', 'ILLEGAL_GENERATION', 'UNKNOWN_MEMBER_ID', 'NOT_COORDINATOR_FOR_GROUP'] as const) {
      const bare = protocolError(CODES[type]);
      consumer.commit = () => Promise.reject(asCommitFailure(bare));
      const { resolved, outcome } = await runBatch(consumer);
      assert.equal(outcome.ok, false, `${type}: eachBatch ends so kafkajs rejoins`);
      assert.equal(!outcome.ok && outcome.error, bare, `${type}: with the bare protocol error, which kafkajs's loop handles by rejoining`);
      assert.deepEqual(resolved, [], `${type}: the fetch position stays at the batch`);
      assert.equal(await counter(metrics, 'commitsRefused', { reason: type }), 1, type);
    }
    assert.equal(await counter(metrics, 'commits'), 0);
    assert.equal(await counter(metrics, 'consumerRestarts'), 0);
    assert.equal(consumers.length, 1, 'no new consumer');
    await source.shutdown();
  });

  it('a commit refused while the coordinator moves is counted, and consuming carries on from the same batch', async () => {
    const { source, consumers, metrics } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    consumer.commit = () => Promise.reject(asCommitFailure(protocolError(CODES.GROUP_COORDINATOR_NOT_AVAILABLE)));
    const { resolved, outcome } = await runBatch(consumer);
    assert.deepEqual(outcome, { ok: true });
    assert.deepEqual(resolved, [], 'not resolved: the batch is fetched again and its commit retried');
    assert.equal(await counter(metrics, 'commitsRefused', { reason: 'GROUP_COORDINATOR_NOT_AVAILABLE' }), 1);
    await source.shutdown();
  });

  it('any other commit failure still ends the batch with that error (kafkajs decides whether to restart)', async () => {
    const { source, consumers, metrics } = setup();
    await source.start();
    const consumer = consumers[0] as FakeConsumer;
    const failure = new (KafkaJSNumberOfRetriesExceeded as ErrorClass)(new (KafkaJSConnectionError as ErrorClass)('Connection error'), { retryCount: 5, retryTime: 1 });
    consumer.commit = () => Promise.reject(failure);
    const { resolved, outcome } = await runBatch(consumer);
    assert.equal(!outcome.ok && outcome.error, failure);
    assert.deepEqual(resolved, []);
    assert.equal(await counter(metrics, 'commitsRefused'), 0);
    await source.shutdown();
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
    assert.deepEqual(consumers[1]?.calls, ['connect', 'subscribe', 'run', 'disconnect']);
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
    assert.equal(loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', rebalanceTimeoutMs: '12000', shutdownTimeoutMs: '5000' }, {}).rebalanceTimeoutMs, 12_000);
    assert.throws(() => loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', shutdownTimeoutMs: '-1' }, {}), (error: Error) => error instanceof ConfigError && /--shutdown-timeout-ms/.test(error.message));
    assert.throws(() => loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092', rebalanceTimeoutMs: 'soon' }, {}), (error: Error) => error instanceof ConfigError && /--rebalance-timeout-ms/.test(error.message));
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
