import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, createKafka, createLogger, type Logger } from '../common/index.ts';
import type { CollectorConfig } from './config.ts';
import { createCollectorApp } from './http.ts';
import { createCollectorMetrics, type CollectorMetrics } from './metrics.ts';
import type { SpanQueue } from '../contract/index.ts';
import { KafkaSpanQueue } from './span-queue.ts';
import { ensureTopics } from './topics.ts';

/** The collector process: OTLP/HTTP in, Kafka out. `start`, then `shutdown` to drain and stop. */
export class Collector {
  readonly metrics: CollectorMetrics;
  private server: Server | undefined;
  private readonly log: Logger;
  readonly queue: SpanQueue;

  constructor(
    private readonly config: CollectorConfig,
    options: { queue?: SpanQueue; log?: Logger; metrics?: CollectorMetrics } = {},
  ) {
    this.log = options.log ?? createLogger('collector');
    this.metrics = options.metrics ?? createCollectorMetrics();
    if (!options.queue && config.kafkaBrokers.length === 0) {
      throw new ConfigError('--kafka-brokers (KAFKA_BROKERS): expected host:port[,host:port...], got nothing');
    }
    this.queue =
      options.queue ??
      new KafkaSpanQueue({
        kafka: createKafka({ brokers: config.kafkaBrokers, clientId: config.kafkaClientId, log: this.log }),
        topic: config.topic,
        deadLetterTopic: config.deadLetterTopic,
        maxPendingSpans: config.maxPendingSpans,
        maxPendingBytes: config.maxPendingBytes,
        maxBatchSpans: config.maxBatchSpans,
        maxSendBytes: config.maxMessageBytes,
        lingerMs: config.lingerMs,
        maxInflightSends: config.maxInflightSends,
        produceTimeoutMs: config.produceTimeoutMs,
        metrics: this.metrics,
        log: this.log,
      });
  }

  /** Creates the topics where the broker allows it, connects, and listens. Resolves with the bound port. */
  async start(): Promise<number> {
    if (this.config.kafkaBrokers.length > 0 && this.queue instanceof KafkaSpanQueue) {
      await ensureTopics(this.config, this.log);
    }
    await this.queue.start();
    const app = createCollectorApp({ config: this.config, queue: this.queue, metrics: this.metrics, log: this.log });
    const server = app.listen(this.config.port, this.config.host);
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    const port = (server.address() as AddressInfo).port;
    this.log.info({ url: `http://${this.config.host}:${port}/v1/traces`, topic: this.config.topic }, 'collector listening');
    return port;
  }

  flush(): Promise<void> {
    return this.queue.flush();
  }

  /** Stops taking requests, waits for pending spans to reach Kafka, disconnects. */
  async shutdown(): Promise<void> {
    const server = this.server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
    }
    await this.queue.shutdown();
  }
}
