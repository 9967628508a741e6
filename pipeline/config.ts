import { z } from 'zod';
import type { ClickHouseConnection } from '../common/clickhouse.ts';
import { spanTimeKeys } from '../contract/index.ts';
import {
  brokerList,
  clickhouseIdentifier,
  intAtLeast,
  key,
  nonNegativeInt,
  port,
  positiveNumber,
  shutdownTimeoutMs,
} from '../common/config.ts';

/** The pipeline's rebalance timeout unless configured (see `rebalanceTimeoutMs`). */
export const DEFAULT_REBALANCE_TIMEOUT_MS = 20_000;

/** The pipeline's cap on rows in flight unless configured (see `maxInFlightBytes`). */
export const DEFAULT_MAX_IN_FLIGHT_BYTES = 24 * 2 ** 20;

/** Where ClickHouse is and how the schema is laid out; shared by the pipeline, `migrate`, `serve` and `query`. */
export const storageConfigSchema = z.object({
  /** A ClickHouse server's HTTP URL (CLICKHOUSE_URL). Absent: embedded ClickHouse (chdb) under `data`. */
  clickhouseUrl: key(z.url({ error: 'expected an http(s) URL such as http://clickhouse:8123' }).optional(), {
    help: 'ClickHouse HTTP URL; without it, embedded ClickHouse under --data',
    env: 'CLICKHOUSE_URL',
    placeholder: 'url',
  }),
  clickhouseUser: key(z.string().default('default'), { help: 'ClickHouse user', env: 'CLICKHOUSE_USER', placeholder: 'user' }),
  clickhousePassword: key(z.string().default(''), {
    help: 'ClickHouse password',
    env: 'CLICKHOUSE_PASSWORD',
    placeholder: 'password',
    secret: true,
  }),
  /** Database holding holdscope's tables. */
  database: key(clickhouseIdentifier().default('holdscope'), {
    help: "database holding holdscope's tables",
    env: 'CLICKHOUSE_DATABASE',
    placeholder: 'name',
  }),
  /** Data directory of embedded ClickHouse: under the working directory so `npm start` keeps its data across runs. */
  data: key(z.string().min(1).default('.data/clickhouse'), { help: 'embedded ClickHouse data directory', placeholder: 'dir' }),
  /** ClickHouse cluster name for ON CLUSTER, Replicated and Distributed tables (CLICKHOUSE_CLUSTER). */
  clickhouseCluster: key(clickhouseIdentifier().optional(), {
    help: 'ClickHouse cluster: ON CLUSTER, Replicated and Distributed tables',
    env: 'CLICKHOUSE_CLUSTER',
    placeholder: 'name',
  }),
  /**
   * How the schema reaches the nodes of `clickhouseCluster`: 'on-cluster', each statement sent once with ON CLUSTER
   * and Replicated engines (the production layout, which needs ClickHouse's DDL queue and Keeper); 'node-by-node',
   * each statement sent to every node of `clickhouseNodes` in turn with plain engines, for a cluster without them
   * (each node's migrations recorded on that node; replicas written by the Distributed tables, internal_replication
   * false). Default 'on-cluster': a cluster with Keeper replicates and heals itself, which node-by-node does not.
   */
  clickhouseClusterDdl: key(z.enum(['on-cluster', 'node-by-node']).default('on-cluster'), {
    help: "how the schema reaches a cluster's nodes: on-cluster (ON CLUSTER, Replicated) or node-by-node",
    env: 'CLICKHOUSE_CLUSTER_DDL',
    placeholder: 'mode',
  }),
  /**
   * The HTTP URL of every node of the cluster (each replica of each shard), for node-by-node DDL. None by default:
   * ON CLUSTER reaches the nodes from the one of `clickhouseUrl`, and system.clusters names their native ports only.
   */
  clickhouseNodes: key(
    z
      .string()
      .default('')
      .transform((s) =>
        s
          .split(',')
          .map((u) => u.trim())
          .filter((u) => u.length > 0),
      )
      .refine((urls) => urls.every((u) => /^https?:\/\/[^\s,]+$/.test(u)), 'expected http(s) URLs, comma-separated'),
    { help: 'HTTP URL of every cluster node, for node-by-node DDL', env: 'CLICKHOUSE_NODES', placeholder: 'url,...' },
  ),
  retentionDays: spanTimeKeys.retentionDays,
});
export type StorageConfig = z.output<typeof storageConfigSchema>;

/** How to reach the configured ClickHouse, for common/clickhouse.ts (a server's URL, or embedded under `data`). */
export function clickHouseConnection(config: StorageConfig): ClickHouseConnection {
  return { url: config.clickhouseUrl, user: config.clickhouseUser, password: config.clickhousePassword, dataPath: config.data };
}

export const pipelineConfigSchema = storageConfigSchema.extend({
  /** Kafka bootstrap brokers (KAFKA_BROKERS). */
  kafkaBrokers: key(brokerList(), { help: 'Kafka bootstrap brokers', env: 'KAFKA_BROKERS', placeholder: 'host:port,...' }),
  /** Topics read: holdscope's collector writes pd-spans; add otlp_spans to read the OpenTelemetry Collector's Kafka exporter. */
  topics: key(
    z
      .string()
      .default('pd-spans')
      .transform((s) =>
        s
          .split(',')
          .map((t) => t.trim())
          .filter((t) => t.length > 0),
      ),
    { help: 'topics to read (add otlp_spans for the OpenTelemetry Collector Kafka exporter)', placeholder: 'list' },
  ),
  groupId: key(z.string().min(1).default('holdscope-pipeline'), { help: 'consumer group', placeholder: 'id' }),
  /** Rows per INSERT. */
  maxBatchRows: key(intAtLeast(1).default(50_000), { help: 'rows per INSERT', placeholder: 'n' }),
  /** How long rows wait for more before an INSERT (ms). */
  lingerMs: key(nonNegativeInt().default(200), { help: 'how long rows wait for more before an INSERT', placeholder: 'ms' }),
  /**
   * Least time between the starts of two record refreshes while rows keep coming (ms): 1000. A lifecycle's spans
   * arrive over seconds and a refresh computes every lifecycle its batches touched, so spaced a second apart each
   * record is computed about a third as often, and the ClickHouse time that saves goes to the inserts: at 10 k
   * spans/s on 2 cores, freshness p99 1.8 s rather than 3.1 s with rounds back to back (0). A round does not wait
   * once no rows have come for 50 ms and none are being inserted (its writers are all the consumer has in flight),
   * so a pipeline draining a backlog is not held. The stored records the window queries read trail the spans by up
   * to this much more; the lifecycles view does not.
   */
  refreshIntervalMs: key(nonNegativeInt().default(1000), {
    help: 'least time between two refreshes of the stored records while rows keep coming',
    placeholder: 'ms',
  }),
  /**
   * Partitions processed concurrently by one instance (their rows share INSERTs): 8, so that on a broker that
   * returns small batches an INSERT still carries several partitions' rows.
   */
  partitionsConsumedConcurrently: key(intAtLeast(1).default(8), { help: 'partitions processed at once', placeholder: 'n' }),
  /**
   * Bytes of encoded span rows (Native blocks, pipeline/native.ts) the consumer hands to the writer ahead of ClickHouse's
   * acknowledgement; past it, batches wait before they are decoded (backpressure: nothing is dropped). 24 MiB: on the
   * benchmark's 0.89 M-span drain, where ClickHouse is the bottleneck and the cap is always reached, 16, 24, 32 and
   * 48 MiB drained 31,000, 34,000, 36,000 and 38,000 spans/s with peak RSS (192 MiB heap, 2 MiB fetches) of
   * 360–376, 378–390, 389–404 and 402–404 MiB: 24 kept the process under 400 MiB. With 1 MiB fetches (below) 32 MiB
   * peaked at 324–329 MiB, with no throughput gain two runs could show.
   */
  maxInFlightBytes: key(intAtLeast(1024).default(DEFAULT_MAX_IN_FLIGHT_BYTES), {
    help: 'encoded rows handed to ClickHouse and not yet acknowledged before the consumer waits',
    placeholder: 'bytes',
  }),
  /**
   * Bytes fetched per partition per request (bounds memory with the concurrency: a fetch asks each broker for up to
   * this × `partitionsConsumedConcurrently`): 1 MiB, the Java client's max.partition.fetch.bytes. Fetched messages
   * are Buffers outside the V8 heap limit, so this, not the heap, decided the last tens of MiB: draining the bench's
   * 0.89 M-span backlog in alternating runs, 2 MiB peaked at 380–403 MiB RSS and 1 MiB at 311–346 MiB, at the same
   * throughput within the runs' noise (18.0–21.8 k against 17.2–20.3 k spans/s, four runs each). The collector's
   * record batches are at most 1,000,000 bytes (its --max-message-bytes), so one always fits a fetch.
   */
  maxBytesPerPartition: key(intAtLeast(1024).default(1024 * 1024), {
    help: 'bytes fetched per partition per request',
    placeholder: 'bytes',
  }),
  sessionTimeoutMs: key(positiveNumber().default(30_000), { help: 'Kafka consumer group session timeout', placeholder: 'ms' }),
  heartbeatIntervalMs: key(positiveNumber().default(3_000), { help: 'Kafka consumer heartbeat interval', placeholder: 'ms' }),
  /**
   * How long the group waits for its members to rejoin in a rebalance (ms): 20 s, room for the batches in hand to
   * finish their INSERT (a member that takes longer is dropped from that generation, its commits are refused and it
   * rejoins). It also bounds a SIGTERM during a join, which waits for the join's answer for up to this plus 5 s:
   * 20 s keeps that under the shutdown deadline. (kafkajs's own default is 60 s.) Against librdkafka's mock cluster,
   * which answers a rejoin only after the session timeout minus 1 s, keep it above the session timeout minus 6 s.
   */
  rebalanceTimeoutMs: key(positiveNumber().default(DEFAULT_REBALANCE_TIMEOUT_MS), {
    help: 'how long the group waits for members to rejoin in a rebalance',
    placeholder: 'ms',
  }),
  /**
   * Longest a fetch waits for data to arrive (ms): 500, the Java client's fetch.max.wait.ms. It bounds how stale a
   * quiet partition's first new span gets before the fetch returns, and how fast a SIGTERM or a rebalance is noticed;
   * kafkajs's own default of 5 s showed up as 4–5 s of freshness on the benchmark's broker.
   */
  fetchMaxWaitMs: key(positiveNumber().default(500), { help: 'longest a Kafka fetch waits for data', placeholder: 'ms' }),
  shutdownTimeoutMs: shutdownTimeoutMs(),
  /** Applied again as spans are read from Kafka: the OpenTelemetry Collector's exporter writes them unchecked. */
  maxClockSkewMs: spanTimeKeys.maxClockSkewMs,
  /** 9465, beside the OpenTelemetry Collector's and the Prometheus exporters' usual ports. */
  metricsPort: key(port().default(9465), {
    help: 'port of /metrics, /healthz and /readyz',
    env: 'HOLDSCOPE_METRICS_PORT',
    placeholder: 'port',
  }),
  /** All interfaces: Prometheus scrapes the pipeline from another host. The port serves metrics only, no span data. */
  metricsHost: key(z.string().min(1).default('0.0.0.0'), {
    help: 'listen address of the metrics port',
    env: 'HOLDSCOPE_METRICS_HOST',
    placeholder: 'address',
  }),
});
export type PipelineConfig = z.output<typeof pipelineConfigSchema>;

/** How spans are batched into ClickHouse, in `holdscope pipeline` and in the all-in-one `start` alike. */
export const writerConfigSchema = pipelineConfigSchema.pick({ maxBatchRows: true, lingerMs: true, refreshIntervalMs: true });
