import { z } from 'zod';
import { nonNegativeInt, parseConfig, positiveNumber } from '../common/config.ts';

const identifier = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'expected an identifier ([A-Za-z_][A-Za-z0-9_]*)');

/** Where ClickHouse is and how the schema is laid out; shared by the pipeline, `migrate`, `serve` and `query`. */
export const storageConfigSchema = z.object({
  /** A ClickHouse server's HTTP URL (CLICKHOUSE_URL). Absent: embedded ClickHouse (chdb) under `data`. */
  clickhouseUrl: z.url({ error: 'expected an http(s) URL such as http://clickhouse:8123' }).optional(),
  clickhouseUser: z.string().default('default'),
  clickhousePassword: z.string().default(''),
  /** Database holding holdscope's tables. */
  database: identifier.default('holdscope'),
  /** Data directory of embedded ClickHouse: under the working directory so `npm start` keeps its data across runs. */
  data: z.string().min(1).default('.data/clickhouse'),
  /** ClickHouse cluster name for ON CLUSTER, Replicated and Distributed tables (CLICKHOUSE_CLUSTER). */
  clickhouseCluster: identifier.optional(),
  /** Days raw spans and lifecycle records are kept: 30 covers a month of postmortems. */
  retentionDays: nonNegativeInt().min(1, 'expected at least 1 day').default(30),
});
export type StorageConfig = z.output<typeof storageConfigSchema>;

export const pipelineConfigSchema = storageConfigSchema.extend({
  /** Kafka bootstrap brokers (KAFKA_BROKERS). */
  kafkaBrokers: z
    .string()
    .transform((s) => s.split(',').map((b) => b.trim()).filter((b) => b.length > 0))
    .refine((list) => list.length > 0 && list.every((b) => /^[^\s:]+:\d+$/.test(b)), 'expected host:port[,host:port...]'),
  /** Topics read: holdscope's collector writes pd-spans; add otlp_spans to read the OpenTelemetry Collector's Kafka exporter. */
  topics: z
    .string()
    .default('pd-spans')
    .transform((s) => s.split(',').map((t) => t.trim()).filter((t) => t.length > 0)),
  groupId: z.string().min(1).default('holdscope-pipeline'),
  /** Rows per INSERT. */
  maxBatchRows: nonNegativeInt().min(1).default(50_000),
  /** How long rows wait for more before an INSERT (ms). */
  lingerMs: nonNegativeInt().default(200),
  /** Partitions processed concurrently by one instance (their rows share INSERTs). */
  partitionsConsumedConcurrently: nonNegativeInt().min(1).default(4),
  /** Bytes fetched per partition per request (bounds memory with the concurrency): 2 MiB. */
  maxBytesPerPartition: nonNegativeInt().min(1024).default(2 * 1024 * 1024),
  sessionTimeoutMs: positiveNumber().default(30_000),
  heartbeatIntervalMs: positiveNumber().default(3_000),
});
export type PipelineConfig = z.output<typeof pipelineConfigSchema>;

export const STORAGE_ENV: Record<string, string> = {
  clickhouseUrl: 'CLICKHOUSE_URL',
  clickhouseUser: 'CLICKHOUSE_USER',
  clickhousePassword: 'CLICKHOUSE_PASSWORD',
  database: 'CLICKHOUSE_DATABASE',
  clickhouseCluster: 'CLICKHOUSE_CLUSTER',
  kafkaBrokers: 'KAFKA_BROKERS',
};

/** Flags over environment over defaults, validated once; errors name the flag and its variable. */
export function loadConfig<S extends z.ZodType>(schema: S, flags: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): z.output<S> {
  const raw: Record<string, unknown> = {};
  for (const [key, name] of Object.entries(STORAGE_ENV)) if (env[name] !== undefined && env[name] !== '') raw[key] = env[name];
  for (const [key, value] of Object.entries(flags)) if (value !== undefined) raw[key] = value;
  return parseConfig(schema, raw, (path) => {
    const flag = '--' + path.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
    return STORAGE_ENV[path] ? `${flag} (${STORAGE_ENV[path]})` : flag;
  });
}
