import { createClickHouse, createKafka, createLogger, type ClickHouseClient, type Logger, type Readiness } from '../common/index.ts';
import { spanTimeWindow } from '../contract/index.ts';
import { clickHouseConnection, type PipelineConfig, type StorageConfig } from './config.ts';
import { InProcessQueue } from './in-process-queue.ts';
import { KafkaSource } from './kafka-source.ts';
import { startLagMonitor } from './lag.ts';
import { createPipelineMetrics, type PipelineMetrics } from './metrics.ts';
import { migrateStorage } from './migrate.ts';
import { SpanWriter } from './writer.ts';

/** Opens ClickHouse as configured and brings the schema up to date. */
export async function openStorage(config: StorageConfig, log: Logger): Promise<ClickHouseClient> {
  const client = await createClickHouse(clickHouseConnection(config));
  await migrateStorage(client, config, log);
  return client;
}

export interface WriterSettings {
  database: string;
  maxBatchRows: number;
  lingerMs: number;
  /** Least time between the starts of two record refreshes (ms); 0 when omitted. */
  refreshIntervalMs?: number;
  /** Told as each record refresh statement stores its records (SpanWriterOptions.onRecordsStored). */
  onRecordsStored?: () => void;
}

export function createWriter(client: ClickHouseClient, settings: WriterSettings, metrics: PipelineMetrics, log: Logger): SpanWriter {
  return new SpanWriter({
    client,
    database: settings.database,
    maxBatchRows: settings.maxBatchRows,
    lingerMs: settings.lingerMs,
    refreshIntervalMs: settings.refreshIntervalMs,
    onRecordsStored: settings.onRecordsStored,
    metrics,
    log,
  });
}

/** `holdscope pipeline`: Kafka in, ClickHouse out. `start`, then `shutdown` to stop after the batches in hand. */
export class Pipeline {
  readonly metrics: PipelineMetrics;
  private readonly log: Logger;
  private client: ClickHouseClient | undefined;
  /** A client given by the caller stays open at shutdown: its owner closes it. */
  private readonly ownsClient: boolean;
  private writer: SpanWriter | undefined;
  private source: KafkaSource | undefined;
  private lag: { sample(): Promise<void>; stop(): Promise<void> } | undefined;
  private readonly onRecordsStored: (() => void) | undefined;

  constructor(
    private readonly config: PipelineConfig,
    options: { log?: Logger; metrics?: PipelineMetrics; client?: ClickHouseClient; onRecordsStored?: () => void } = {},
  ) {
    this.onRecordsStored = options.onRecordsStored;
    this.log = options.log ?? createLogger('pipeline');
    this.metrics = options.metrics ?? createPipelineMetrics();
    this.client = options.client;
    this.ownsClient = options.client === undefined;
  }

  async start(): Promise<void> {
    this.client ??= await openStorage(this.config, this.log);
    this.writer = createWriter(this.client, { ...this.config, onRecordsStored: this.onRecordsStored }, this.metrics, this.log);
    const kafka = createKafka({ brokers: this.config.kafkaBrokers, clientId: `holdscope-pipeline`, log: this.log });
    this.source = new KafkaSource({
      kafka,
      groupId: this.config.groupId,
      topics: this.config.topics,
      writer: this.writer,
      metrics: this.metrics,
      log: this.log,
      partitionsConsumedConcurrently: this.config.partitionsConsumedConcurrently,
      sessionTimeoutMs: this.config.sessionTimeoutMs,
      heartbeatIntervalMs: this.config.heartbeatIntervalMs,
      rebalanceTimeoutMs: this.config.rebalanceTimeoutMs,
      fetchMaxWaitMs: this.config.fetchMaxWaitMs,
      maxBytesPerPartition: this.config.maxBytesPerPartition,
      maxInFlightBytes: this.config.maxInFlightBytes,
      timeWindow: () => spanTimeWindow(Date.now(), this.config.maxClockSkewMs, this.config.retentionDays),
    });
    await this.source.start();
    this.lag = startLagMonitor({ kafka, groupId: this.config.groupId, topics: this.config.topics, metrics: this.metrics, log: this.log });
  }

  flush(): Promise<void> {
    return this.writer?.flush() ?? Promise.resolve();
  }

  /** For /readyz: started, and the consumer is in a group (not crashed, rejoining or stopping), with what it is doing. */
  readiness(): Readiness {
    const consumer = this.source?.status() ?? 'not started';
    return { ready: this.source?.consuming() ?? false, consumer };
  }

  /** Samples consumer lag now rather than at the next interval. */
  sampleLag(): Promise<void> {
    return this.lag?.sample() ?? Promise.resolve();
  }

  /**
   * Stops after the batches in hand. `waitingFor`, when given, holds at every moment what the shutdown still waits
   * on, each entry describing itself when called: for a caller that gives up after a deadline to say why.
   */
  async shutdown(waitingFor: Set<() => string> = new Set()): Promise<void> {
    const step = async (describe: () => string, work: Promise<void> | undefined): Promise<void> => {
      if (!work) return;
      waitingFor.add(describe);
      try {
        await work;
      } finally {
        waitingFor.delete(describe);
      }
    };
    await step(() => 'the consumer lag monitor', this.lag?.stop());
    // The consumer's disconnect waits for the batches in hand, and they wait for the writer: stop its retries
    // meanwhile, or a ClickHouse outage would keep the process from ever stopping. Rejected batches are not committed.
    const source = this.source;
    const writer = this.writer;
    const stopped = await Promise.allSettled([
      step(() => `the Kafka consumer (${source?.status()})`, source?.shutdown()),
      step(() => `the writer (${writer?.pendingRowCount ?? 0} rows not yet acknowledged by ClickHouse)`, writer?.shutdown()),
    ]);
    if (this.ownsClient) await step(() => 'the ClickHouse client', this.client?.close());
    for (const result of stopped) if (result.status === 'rejected') throw result.reason;
  }
}

export { InProcessQueue };
