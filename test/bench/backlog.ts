import { CompressionTypes, Partitioners, type Kafka, type Message } from 'kafkajs';
import { MESSAGE_HEADERS, type DeadLetter, type SpanMessage, type SpanQueue } from '../../contract/index.ts';
import { BATCH_OVERHEAD_BYTES, Collector, collectorConfigSchema, mergeByPartition, recordBytes } from '../../collector/index.ts';
import { success, type RetryableResult } from '../../common/index.ts';
import { buildScenario, runSimulation } from '../../emitter/index.ts';
import { quietLog } from '../support/stack.ts';

/** The collector's default --max-message-bytes, which bounds each of its sends. */
const COLLECTOR_SEND_BYTES = collectorConfigSchema.parse({}).maxMessageBytes;

export interface Backlog {
  topic: string;
  spans: number;
  messages: number;
  bytes: number;
  lifecycles: number;
  produceSeconds: number;
}

/** Keeps what holdscope's collector would publish, byte for byte, so the bench can produce it in large sends. */
class CapturingQueue implements SpanQueue {
  readonly messages: SpanMessage[] = [];
  deadLetters = 0;
  start(): Promise<void> {
    return Promise.resolve();
  }
  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    for (const m of messages) this.messages.push(m);
    this.deadLetters += deadLetters.length;
    return Promise.resolve(success(undefined));
  }
  healthy(): boolean {
    return true;
  }
  flush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * Fills `topic` with about `spans` spans as holdscope's collector writes them (OTLP protobuf messages of the
 * lifecycles one send holds, one per partition, from the simulator's engines exporting OTLP/HTTP to the collector:
 * the mixed scenario, with aborts, a storm, tails and late writes), produced in sends of 20,000 messages. Large
 * sends matter on the mock broker, which answers a fetch with one record batch per partition: the collector's own
 * small, frequent sends would make every fetch tiny, for the ceiling and the pipeline alike, and measure the mock
 * rather than either.
 */
export async function produceBacklog(options: {
  kafka: Kafka;
  topic: string;
  spans: number;
  seed: number;
  idPrefix: string;
  startTimeMs: number;
  onProgress?: (spans: number) => void;
}): Promise<Backlog> {
  const queue = new CapturingQueue();
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  const started = Date.now();
  let lifecycles: number;
  try {
    const { config } = buildScenario('mixed', options.seed);
    // About 16.4 spans per request in the mixed scenario; arrivals end on the request count, not the clock.
    config.requests = Math.max(1, Math.round(options.spans / 16.4));
    config.durationMs = Number.MAX_SAFE_INTEGER;
    config.idPrefix = options.idPrefix;
    const summary = await runSimulation({
      config,
      endpoint: `http://127.0.0.1:${port}`,
      startTimeMs: options.startTimeMs,
      pace: 'fast',
      batchSize: 2048,
      keepTruth: false,
      onProgress: (p) => options.onProgress?.(p.spansExported),
    });
    if (summary.spansFailed > 0) throw new Error(`the collector refused ${summary.spansFailed} spans while the backlog was produced`);
    lifecycles = config.requests;
  } finally {
    await collector.shutdown();
  }
  if (queue.deadLetters > 0) throw new Error(`the collector dead-lettered ${queue.deadLetters} simulated spans`);

  const partitions = await topicPartitions(options.kafka, options.topic);
  const producer = options.kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  await producer.connect();
  let spans = 0;
  let bytes = 0;
  let produced = 0;
  try {
    for (let i = 0; i < queue.messages.length; i += 20_000) {
      const slice = queue.messages.slice(i, i + 20_000);
      const messages = mergedAsCollectorSends(options.topic, slice, partitions);
      await producer.send({ topic: options.topic, messages, acks: -1, compression: CompressionTypes.None });
      produced += messages.length;
      for (const m of slice) {
        spans += m.spans;
        bytes += m.value.length;
      }
    }
  } finally {
    await producer.disconnect();
  }
  const messages = await topicMessages(options.kafka, options.topic);
  if (messages !== produced) throw new Error(`${options.topic} holds ${messages} messages, ${produced} were produced`);
  return { topic: options.topic, spans, messages, bytes, lifecycles, produceSeconds: (Date.now() - started) / 1000 };
}

/**
 * The messages as the collector's sends would merge them: consecutive messages in runs of at most one send's bytes
 * (its default --max-message-bytes), each run one message per partition (collector/partitions.ts).
 */
function mergedAsCollectorSends(topic: string, slice: readonly SpanMessage[], partitions: number): Message[] {
  const merged: Message[] = [];
  let run: Message[] = [];
  let runBytes = 0;
  for (const m of slice) {
    const size = recordBytes(m.key, m.value.length, MESSAGE_HEADERS);
    if (run.length > 0 && runBytes + size > COLLECTOR_SEND_BYTES - BATCH_OVERHEAD_BYTES) {
      merged.push(...mergeByPartition(topic, run, partitions));
      run = [];
      runBytes = 0;
    }
    run.push({ key: m.key, value: m.value, headers: MESSAGE_HEADERS });
    runBytes += size;
  }
  if (run.length > 0) merged.push(...mergeByPartition(topic, run, partitions));
  return merged;
}

async function topicPartitions(kafka: Kafka, topic: string): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
    return topics[0]?.partitions.length ?? 0;
  } finally {
    await admin.disconnect();
  }
}

/** Messages in a topic; fails if the broker dropped any (the mock keeps about 5 MB per partition). */
export async function topicMessages(kafka: Kafka, topic: string): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    const dropped = offsets.filter((o) => o.low !== '0');
    if (dropped.length > 0)
      throw new Error(`the broker dropped the oldest messages of ${dropped.length} partition(s) of ${topic}: use more partitions`);
    return offsets.reduce((sum, o) => sum + Number(o.high), 0);
  } finally {
    await admin.disconnect();
  }
}
