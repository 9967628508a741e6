import { Readable } from 'node:stream';
import type { Kafka } from 'kafkajs';
import type { ClickHouseClient } from '../../common/index.ts';
import {
  eventsOf,
  fetchByteLimits,
  NativeRowsBuilder,
  nativeSpanInsert,
  pipelineConfigSchema,
  type NativeRows,
} from '../../pipeline/index.ts';
import { readTopic } from '../support/kafka-read.ts';
import { mergeNativeBlocks } from './native-merge.ts';
import { KAFKA_TEST_HEARTBEAT_INTERVAL_MS, KAFKA_TEST_SESSION_TIMEOUT_MS } from '../support/kafka-mock.ts';

/** The pipeline's defaults: the ceiling fetches and batches as a pipeline does, so the ratio measures holdscope's code. */
const PIPELINE_DEFAULTS = pipelineConfigSchema.parse({ kafkaBrokers: 'unused:9092' });

export interface RunResult {
  rows: number;
  seconds: number;
  spansPerSecond: number;
}

/** Each message's rows, serialized ahead of time the way the pipeline inserts them, by `partition:offset`. */
export async function preSerialize(kafka: Kafka, topic: string): Promise<{ byOffset: Map<string, NativeRows>; rows: number }> {
  const byOffset = new Map<string, NativeRows>();
  let total = 0;
  for (const message of await readTopic(kafka, topic, 300_000)) {
    const encoded = new NativeRowsBuilder();
    for (const event of eventsOf(message.value).events) encoded.add(event);
    const rows = encoded.build();
    byOffset.set(`${message.partition}:${message.offset}`, rows);
    total += rows.rows;
  }
  return { byOffset, rows: total };
}

/**
 * The ceiling: kafkajs consuming the topic in a group and ClickHouse inserting the pre-serialized rows of what it
 * fetched, committing after each INSERT, with the pipeline's defaults (PIPELINE_DEFAULTS: partitions processed at
 * once, fetch sizes, rows per INSERT and linger) and no holdscope code in the loop: no decoding, no validation, no
 * encoding (each message's Native block was built ahead; an INSERT's blocks are merged into one, byte copies, as the
 * pipeline sends a block per fetched batch). What the same broker and ClickHouse allow on this machine. Unlike the pipeline, which hands batches on
 * and fetches more, each batch here waits for its INSERT, so an INSERT also starts once half the partitions wait.
 */
export async function runCeiling(options: {
  kafka: Kafka;
  topic: string;
  client: ClickHouseClient;
  database: string;
  prepared: Map<string, NativeRows>;
  expectedRows: number;
  onProgress?: (rows: number) => void;
}): Promise<RunResult> {
  const { kafka, topic, client, database, prepared, expectedRows } = options;
  const consumer = kafka.consumer({
    groupId: `ceiling-${topic}`,
    sessionTimeout: KAFKA_TEST_SESSION_TIMEOUT_MS,
    heartbeatInterval: KAFKA_TEST_HEARTBEAT_INTERVAL_MS,
    ...fetchByteLimits(PIPELINE_DEFAULTS.maxBytesPerPartition, PIPELINE_DEFAULTS.partitionsConsumedConcurrently),
  });
  let pending: { blocks: Buffer[]; rows: number; done: () => void }[] = [];
  let pendingRows = 0;
  let inserted = 0;
  let firstFetch = 0;
  let chain = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  let finished!: () => void;
  const allIn = new Promise<void>((resolve) => (finished = resolve));

  const insertPending = async () => {
    while (pending.length > 0) {
      const batch = pending;
      pending = [];
      const rows = batch.reduce((n, p) => n + p.rows, 0);
      pendingRows -= rows;
      const result = await client.exec({
        query: nativeSpanInsert(database),
        values: Readable.from([mergeNativeBlocks(batch.flatMap((p) => p.blocks))], { objectMode: false }),
      });
      for await (const _ of result.stream); // read to the end, which frees the connection
      inserted += rows;
      options.onProgress?.(inserted);
      for (const p of batch) p.done();
      if (inserted >= expectedRows) finished();
    }
  };
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    chain = chain.then(insertPending);
  };

  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    partitionsConsumedConcurrently: PIPELINE_DEFAULTS.partitionsConsumedConcurrently,
    eachBatch: async ({ batch, resolveOffset }) => {
      if (batch.messages.length === 0) return;
      firstFetch ||= performance.now();
      const blocks: Buffer[] = [];
      let rows = 0;
      for (const m of batch.messages) {
        const encoded = prepared.get(`${batch.partition}:${m.offset}`);
        if (!encoded) throw new Error(`no pre-serialized rows for ${batch.partition}:${m.offset}`);
        blocks.push(encoded.block);
        rows += encoded.rows;
      }
      await new Promise<void>((done) => {
        pending.push({ blocks, rows, done });
        pendingRows += rows;
        if (pendingRows >= PIPELINE_DEFAULTS.maxBatchRows || pending.length >= PIPELINE_DEFAULTS.partitionsConsumedConcurrently / 2)
          flush();
        else timer ??= setTimeout(flush, PIPELINE_DEFAULTS.lingerMs);
      });
      resolveOffset(batch.lastOffset());
      await consumer.commitOffsets([{ topic, partition: batch.partition, offset: (BigInt(batch.lastOffset()) + 1n).toString() }]);
    },
  });
  await allIn;
  const seconds = (performance.now() - firstFetch) / 1000;
  await consumer.disconnect();
  return { rows: inserted, seconds, spansPerSecond: inserted / seconds };
}
