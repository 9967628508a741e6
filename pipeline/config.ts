import { z } from 'zod';
import { intAtLeast, nonNegativeInt, parseConfig, positiveNumber } from '../common/config.ts';

/** The pipeline's rebalance timeout unless configured (see `rebalanceTimeoutMs`). */
export const DEFAULT_REBALANCE_TIMEOUT_MS = 20_000;

/** The pipeline's cap on rows in flight unless configured (see `maxInFlightBytes`). */
export const DEFAULT_MAX_IN_FLIGHT_BYTES = 24 * 2 ** 20;

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
  maxBatchRows: intAtLeast(1).default(50_000),
  /** How long rows wait for more before an INSERT (ms). */
  lingerMs: nonNegativeInt().default(200),
  /**
   * Least time between the starts of two record refreshes while rows keep coming (ms): 1000. A lifecycle's spans
   * arrive over seconds and a refresh computes every lifecycle its batches touched, so spaced a second apart each
   * record is computed about a third as often, and the ClickHouse time that saves goes to the inserts: at 10 k
   * spans/s on 2 cores, freshness p99 1.8 s rather than 3.1 s with rounds back to back (0). A round does not wait
   * once no rows have come for 50 ms and none are being inserted (its writers are all the consumer has in flight),
   * so a pipeline draining a backlog is not held. The stored records the window queries read trail the spans by up
   * to this much more; the lifecycles view does not.
   */
  refreshIntervalMs: nonNegativeInt().default(1000),
  /**
   * Partitions processed concurrently by one instance (their rows share INSERTs): 8, so that on a broker that
   * returns small batches an INSERT still carries several partitions' rows.
   */
  partitionsConsumedConcurrently: intAtLeast(1).default(8),
  /**
   * Bytes of encoded span rows (TabSeparated text) the consumer hands to the writer ahead of ClickHouse's
   * acknowledgement; past it, batches wait before they are decoded (backpressure: nothing is dropped). 24 MiB: on the
   * benchmark's 0.89 M-span drain, where ClickHouse is the bottleneck and the cap is always reached, 16, 24, 32 and
   * 48 MiB drained 31,000, 34,000, 36,000 and 38,000 spans/s with peak RSS (192 MiB heap, 2 MiB fetches) of
   * 360–376, 378–390, 389–404 and 402–404 MiB: 24 kept the process under 400 MiB. With 1 MiB fetches (below) 32 MiB
   * peaked at 324–329 MiB, with no throughput gain two runs could show.
   */
  maxInFlightBytes: intAtLeast(1024).default(DEFAULT_MAX_IN_FLIGHT_BYTES),
  /**
   * Bytes fetched per partition per request (bounds memory with the concurrency: a fetch asks each broker for up to
   * this × `partitionsConsumedConcurrently`): 1 MiB, the Java client's max.partition.fetch.bytes. Fetched messages
   * are Buffers outside the V8 heap limit, so this, not the heap, decided the last tens of MiB: draining the bench's
   * 0.89 M-span backlog in alternating runs, 2 MiB peaked at 380–403 MiB RSS and 1 MiB at 311–346 MiB, at the same
   * throughput within the runs' noise (18.0–21.8 k against 17.2–20.3 k spans/s, four runs each). The collector's
   * record batches are at most 1,000,000 bytes (its --max-message-bytes), so one always fits a fetch.
   */
  maxBytesPerPartition: intAtLeast(1024).default(1024 * 1024),
  sessionTimeoutMs: positiveNumber().default(30_000),
  heartbeatIntervalMs: positiveNumber().default(3_000),
  /**
   * How long the group waits for its members to rejoin in a rebalance (ms): 20 s, room for the batches in hand to
   * finish their INSERT (a member that takes longer is dropped from that generation, its commits are refused and it
   * rejoins). It also bounds a SIGTERM during a join, which waits for the join's answer for up to this plus 5 s:
   * 20 s keeps that under the shutdown deadline. (kafkajs's own default is 60 s.) Against librdkafka's mock cluster,
   * which answers a rejoin only after the session timeout minus 1 s, keep it above the session timeout minus 6 s.
   */
  rebalanceTimeoutMs: positiveNumber().default(DEFAULT_REBALANCE_TIMEOUT_MS),
  /**
   * Longest a fetch waits for data to arrive (ms): 500, the Java client's fetch.max.wait.ms. It bounds how stale a
   * quiet partition's first new span gets before the fetch returns, and how fast a SIGTERM or a rebalance is noticed;
   * kafkajs's own default of 5 s showed up as 4–5 s of freshness on the benchmark's broker.
   */
  fetchMaxWaitMs: positiveNumber().default(500),
  /**
   * How long `holdscope pipeline` may take to stop after SIGTERM or SIGINT (ms) before it exits anyway, with status 1
   * and a log line naming what it still waited for: 30 s, above the rebalance timeout plus 5 s that a join in
   * progress can take. Exiting early loses nothing: offsets are committed only after ClickHouse has the rows.
   */
  shutdownTimeoutMs: positiveNumber().default(30_000),
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
