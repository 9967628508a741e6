import { z } from 'zod';
import { spanTimeKeys } from '../contract/index.ts';
import { brokerList, key, loadConfig, shutdownTimeoutMs, nonNegativeInt, port, positiveNumber } from '../common/config.ts';

export const collectorConfigSchema = z.object({
  /** OTLP/HTTP port; 4318 is the OTLP/HTTP default every exporter assumes. */
  port: key(port().default(4318), { help: 'OTLP/HTTP port', env: 'HOLDSCOPE_OTLP_PORT', placeholder: 'port' }),
  /** Listen address; all interfaces by default, as engines send from other hosts. */
  host: key(z.string().min(1).default('0.0.0.0'), {
    help: 'listen address of the OTLP/HTTP port',
    env: 'HOLDSCOPE_OTLP_HOST',
    placeholder: 'address',
  }),
  /** Kafka bootstrap brokers (KAFKA_BROKERS). */
  kafkaBrokers: key(
    brokerList()
      .optional()
      .transform((list) => list ?? []),
    { help: 'Kafka bootstrap brokers', env: 'KAFKA_BROKERS', placeholder: 'host:port,...' },
  ),
  kafkaClientId: key(z.string().min(1).default('holdscope-collector'), { help: 'Kafka client id', placeholder: 'id' }),
  /** Topic for valid PD spans. */
  topic: key(z.string().min(1).default('pd-spans'), { help: 'topic for PD spans', env: 'HOLDSCOPE_TOPIC', placeholder: 'name' }),
  /** Topic for rejected PD spans with their reason. */
  deadLetterTopic: key(z.string().min(1).default('pd-spans-dead-letter'), { help: 'topic for rejected spans', placeholder: 'name' }),
  /** Partitions when the collector creates the topic: room for 12 pipeline consumers. */
  topicPartitions: key(nonNegativeInt().default(12), { help: 'partitions when creating the topic', placeholder: 'n' }),
  /** Replication factor when the collector creates the topics; -1 takes the broker's default. */
  topicReplicationFactor: key(z.coerce.number().int().min(-1).default(-1), {
    help: "replication factor when creating the topics (-1: the broker's)",
    placeholder: 'n',
  }),
  /** retention.ms when the collector creates the topics: 7 days, the replay window after a pipeline outage. */
  topicRetentionMs: key(nonNegativeInt().default(7 * 24 * 3600 * 1000), {
    help: 'retention.ms when creating the topics',
    placeholder: 'ms',
  }),
  /**
   * Largest request body after decompression (bytes): 4 MiB, some 16 SDK batches of 512 PD spans (about 250 KB
   * each). It bounds memory too: decoding a body may take at most DECODE_BUDGET_FACTOR (16) times this, or the
   * request is refused with 413, so one request costs at most about 64 MiB while it is decoded.
   */
  maxBodyBytes: key(nonNegativeInt().default(4 * 1024 * 1024), { help: 'largest body after decompression', placeholder: 'bytes' }),
  /** Most spans in one request; counted while decoding, so a request past it is refused before it is built. */
  maxSpansPerRequest: key(nonNegativeInt().default(50_000), { help: 'most spans in one request', placeholder: 'n' }),
  /**
   * Longest attribute of a PD span or its resource: characters of a key or string, bytes of a bytes value,
   * values of an array or key-value list, nested ones counted (and each key, string or bytes inside within it too).
   */
  maxAttributeLength: key(nonNegativeInt().default(4096), {
    help: 'longest attribute value of a PD span or its resource: characters, bytes, or values nested ones counted',
    placeholder: 'n',
  }),
  /** Most attributes on a PD span or its resource: the OpenTelemetry SDKs' default attribute count limit. */
  maxAttributes: key(
    z.coerce.number({ error: 'expected an integer >= 1' }).int('expected an integer >= 1').min(1, 'expected an integer >= 1').default(128),
    { help: 'most attributes on a PD span or its resource', placeholder: 'n' },
  ),
  /**
   * Largest Kafka record batch the collector produces (bytes, framing included): each message, and what one
   * send carries, stays within it. Below the 1048588 bytes of a broker's default message.max.bytes, which a
   * broker checks per partition batch. A lifecycle's spans are split over several messages with the same key
   * when they do not fit one; a single span that does not fit is rejected (partial success, dead letter).
   */
  maxMessageBytes: key(
    z.coerce
      .number({ error: 'expected an integer >= 16384 (bytes)' })
      .int('expected an integer >= 16384 (bytes)')
      .min(16_384, 'expected an integer >= 16384 (bytes)')
      .default(1_000_000),
    { help: 'largest Kafka record batch produced, so each message', placeholder: 'bytes' },
  ),
  ...spanTimeKeys,
  /** Spans accepted but not yet acknowledged by Kafka; beyond it requests get 429 (bounded memory). */
  maxPendingSpans: key(nonNegativeInt().default(200_000), { help: 'spans waiting for Kafka before answering 429', placeholder: 'n' }),
  /** Bytes of Kafka messages accepted but not yet acknowledged; beyond it requests get 429 (bounded memory). */
  maxPendingBytes: key(nonNegativeInt().default(64 * 1024 * 1024), {
    help: 'bytes of messages waiting for Kafka before answering 429',
    placeholder: 'bytes',
  }),
  /** Spans produced per Kafka send. */
  maxBatchSpans: key(nonNegativeInt().default(20_000), { help: 'spans produced per Kafka send', placeholder: 'n' }),
  /** How long a batch waits for more spans before it is sent (ms). */
  lingerMs: key(nonNegativeInt().default(5), { help: 'how long a batch waits for more spans before it is sent', placeholder: 'ms' }),
  /** Kafka sends in flight at once. */
  maxInflightSends: key(nonNegativeInt().default(4), { help: 'Kafka sends in flight at once', placeholder: 'n' }),
  /** How long a request waits for Kafka before it gets 503 (ms). */
  produceTimeoutMs: key(positiveNumber().default(10_000), { help: 'how long a request waits for Kafka before 503', placeholder: 'ms' }),
  shutdownTimeoutMs: shutdownTimeoutMs(),
  /** Bearer token required on every request when set (HOLDSCOPE_COLLECTOR_TOKEN). */
  authToken: key(z.string().min(16, 'expected a token of at least 16 characters').optional(), {
    help: 'bearer token required on every request but /healthz and /readyz',
    env: 'HOLDSCOPE_COLLECTOR_TOKEN',
    placeholder: 'token',
    secret: true,
  }),
});

export type CollectorConfig = z.output<typeof collectorConfigSchema>;

/** Decoding a request may take this many times --max-body-bytes in memory (an estimate); past it the answer is 413. */
export const DECODE_BUDGET_FACTOR = 16;
/**
 * The Kafka messages and dead letters of one request may take this many times --max-body-bytes; past it the
 * answer is 413 (every lifecycle's message repeats its resource, so a small body can ask for far more).
 */
export const KAFKA_BUDGET_FACTOR = 8;

/** Flags win over environment, environment over defaults. */
export function loadCollectorConfig(flags: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): CollectorConfig {
  return loadConfig(collectorConfigSchema, flags, env);
}
