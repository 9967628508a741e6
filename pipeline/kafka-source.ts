import type { Consumer, Kafka } from 'kafkajs';
import type { Logger } from '../common/index.ts';
import { rowsOf } from './ingest.ts';
import type { PipelineMetrics } from './metrics.ts';
import type { SpanWriter } from './writer.ts';

export interface KafkaSourceOptions {
  kafka: Kafka;
  groupId: string;
  topics: string[];
  writer: SpanWriter;
  metrics: PipelineMetrics;
  log: Logger;
  /** Partitions processed at once; their rows share INSERTs. */
  partitionsConsumedConcurrently: number;
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  /** Bytes fetched per partition per request: with the concurrency, this bounds memory. */
  maxBytesPerPartition: number;
}

const RESTART_DELAY_MS = 2000;

/**
 * A consumer group member that turns each fetched batch into span rows, waits for ClickHouse to acknowledge
 * them, and only then commits the batch's offsets. A crash before the commit means the batch is read again,
 * which changes nothing downstream (the storage is idempotent under duplicates).
 */
export class KafkaSource {
  private consumer: Consumer | undefined;
  private stopping = false;
  private restartTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: KafkaSourceOptions) {}

  async start(): Promise<void> {
    const { kafka, groupId, topics, writer, metrics, log } = this.options;
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: this.options.sessionTimeoutMs,
      heartbeatInterval: this.options.heartbeatIntervalMs,
      maxBytesPerPartition: this.options.maxBytesPerPartition,
      maxBytes: this.options.maxBytesPerPartition * Math.max(1, this.options.partitionsConsumedConcurrently),
    });
    this.consumer = consumer;
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      // kafkajs restarts by itself after retriable errors; after others (e.g. a failed group sync) it stops.
      if (payload.restart || this.stopping) return;
      metrics.consumerRestarts.inc();
      log.error({ err: payload.error?.message }, 'consumer crashed; restarting');
      this.restartTimer = setTimeout(() => void this.restart(), RESTART_DELAY_MS);
    });
    await consumer.connect();
    await consumer.subscribe({ topics, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.options.partitionsConsumedConcurrently,
      eachBatch: async ({ batch, heartbeat, isRunning, isStale, resolveOffset }) => {
        if (batch.messages.length === 0) return;
        const rows = rowsOf(
          batch.messages.map((m) => m.value),
          metrics,
          log,
        );
        // Rows may wait behind other partitions' INSERTs: keep the group membership alive meanwhile.
        const beat = setInterval(() => void heartbeat().catch(() => undefined), this.options.heartbeatIntervalMs);
        try {
          await writer.write(rows, heartbeat);
        } finally {
          clearInterval(beat);
        }
        if (!isRunning() || isStale()) return;
        // Only now may the fetch position move past this batch, and the group's committed offset with it.
        resolveOffset(batch.lastOffset());
        const next = (BigInt(batch.lastOffset()) + 1n).toString();
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
        metrics.commits.inc();
      },
    });
    log.info({ topics, groupId }, 'consuming');
  }

  private async restart(): Promise<void> {
    if (this.stopping) return;
    await this.consumer?.disconnect().catch(() => undefined);
    try {
      await this.start();
    } catch (error) {
      this.options.log.error({ err: (error as Error).message }, 'consumer restart failed; trying again');
      this.restartTimer = setTimeout(() => void this.restart(), RESTART_DELAY_MS);
    }
  }

  async shutdown(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    await this.consumer?.disconnect();
  }
}

