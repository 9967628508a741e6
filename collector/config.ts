import { z } from 'zod';
import { nonNegativeInt, parseConfig, port, positiveNumber } from '../common/config.ts';

const brokerList = z
  .string()
  .transform((s) => s.split(',').map((b) => b.trim()).filter((b) => b.length > 0))
  .refine((list) => list.length > 0 && list.every((b) => /^[^\s:]+:\d+$/.test(b)), 'expected host:port[,host:port...]');

export const collectorConfigSchema = z.object({
  /** OTLP/HTTP port; 4318 is the OTLP/HTTP default every exporter assumes. */
  port: port().default(4318),
  /** Listen address; all interfaces by default, as engines send from other hosts. */
  host: z.string().min(1).default('0.0.0.0'),
  /** Kafka bootstrap brokers (KAFKA_BROKERS). */
  kafkaBrokers: brokerList.optional().transform((list) => list ?? []),
  kafkaClientId: z.string().min(1).default('holdscope-collector'),
  /** Topic for valid PD spans. */
  topic: z.string().min(1).default('pd-spans'),
  /** Topic for rejected PD spans with their reason. */
  deadLetterTopic: z.string().min(1).default('pd-spans-dead-letter'),
  /** Partitions when the collector creates the topic: room for 12 pipeline consumers. */
  topicPartitions: nonNegativeInt().default(12),
  /** Replication factor when the collector creates the topics; -1 takes the broker's default. */
  topicReplicationFactor: z.coerce.number().int().min(-1).default(-1),
  /** retention.ms when the collector creates the topics: 7 days, the replay window after a pipeline outage. */
  topicRetentionMs: nonNegativeInt().default(7 * 24 * 3600 * 1000),
  /**
   * Largest request body after decompression (bytes): 4 MiB, some 16 SDK batches of 512 PD spans (about 250 KB
   * each). It bounds memory too: decoding a body may take at most DECODE_BUDGET_FACTOR (16) times this, or the
   * request is refused with 413, so one request costs at most about 64 MiB while it is decoded.
   */
  maxBodyBytes: nonNegativeInt().default(4 * 1024 * 1024),
  /** Most spans in one request; counted while decoding, so a request past it is refused before it is built. */
  maxSpansPerRequest: nonNegativeInt().default(50_000),
  /**
   * Longest attribute of a PD span or its resource: characters of a key or string, bytes of a bytes value,
   * values of an array or key-value list, nested ones counted (and each key, string or bytes inside within it too).
   */
  maxAttributeLength: nonNegativeInt().default(4096),
  /** Most attributes on a PD span or its resource: the OpenTelemetry SDKs' default attribute count limit. */
  maxAttributes: z.coerce.number({ error: 'expected an integer >= 1' }).int('expected an integer >= 1').min(1, 'expected an integer >= 1').default(128),
  /**
   * Largest Kafka record batch the collector produces (bytes, framing included): each message, and what one
   * send carries, stays within it. Below the 1048588 bytes of a broker's default message.max.bytes, which a
   * broker checks per partition batch. A lifecycle's spans are split over several messages with the same key
   * when they do not fit one; a single span that does not fit is rejected (partial success, dead letter).
   */
  maxMessageBytes: z.coerce
    .number({ error: 'expected an integer >= 16384 (bytes)' })
    .int('expected an integer >= 16384 (bytes)')
    .min(16_384, 'expected an integer >= 16384 (bytes)')
    .default(1_000_000),
  /** Spans accepted but not yet acknowledged by Kafka; beyond it requests get 429 (bounded memory). */
  maxPendingSpans: nonNegativeInt().default(200_000),
  /** Bytes of Kafka messages accepted but not yet acknowledged; beyond it requests get 429 (bounded memory). */
  maxPendingBytes: nonNegativeInt().default(64 * 1024 * 1024),
  /** Spans produced per Kafka send. */
  maxBatchSpans: nonNegativeInt().default(20_000),
  /** How long a batch waits for more spans before it is sent (ms). */
  lingerMs: nonNegativeInt().default(5),
  /** Kafka sends in flight at once. */
  maxInflightSends: nonNegativeInt().default(4),
  /** How long a request waits for Kafka before it gets 503 (ms). */
  produceTimeoutMs: positiveNumber().default(10_000),
  /** Bearer token required on every request when set (HOLDSCOPE_COLLECTOR_TOKEN). */
  authToken: z.string().min(16, 'expected a token of at least 16 characters').optional(),
});

export type CollectorConfig = z.output<typeof collectorConfigSchema>;

/** Decoding a request may take this many times --max-body-bytes in memory (an estimate); past it the answer is 413. */
export const DECODE_BUDGET_FACTOR = 16;
/**
 * The Kafka messages and dead letters of one request may take this many times --max-body-bytes; past it the
 * answer is 413 (every lifecycle's message repeats its resource, so a small body can ask for far more).
 */
export const KAFKA_BUDGET_FACTOR = 8;

/** Environment variables that configure the collector, by config key. */
export const COLLECTOR_ENV: Partial<Record<keyof CollectorConfig, string>> = {
  kafkaBrokers: 'KAFKA_BROKERS',
  authToken: 'HOLDSCOPE_COLLECTOR_TOKEN',
  topic: 'HOLDSCOPE_TOPIC',
  port: 'HOLDSCOPE_OTLP_PORT',
};

/** Flags win over environment, environment over defaults. */
export function loadCollectorConfig(flags: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): CollectorConfig {
  const raw: Record<string, unknown> = {};
  for (const [key, name] of Object.entries(COLLECTOR_ENV)) if (name && env[name] !== undefined && env[name] !== '') raw[key] = env[name];
  for (const [key, value] of Object.entries(flags)) if (value !== undefined) raw[key] = value;
  return parseConfig(collectorConfigSchema, raw, (path) => {
    const envName = COLLECTOR_ENV[path as keyof CollectorConfig];
    const flag = '--' + path.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
    return envName ? `${flag} (${envName})` : flag;
  });
}
