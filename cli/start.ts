import { join } from 'node:path';
import { z } from 'zod';
import { Registry } from 'prom-client';
import { Collector, collectorConfigSchema, type CollectorConfig } from '../collector/index.ts';
import { key, loadConfig, shutdownTimeoutMs } from '../common/config.ts';
import { createLogger, stopOrExit, type ClickHouseClient, type Logger } from '../common/index.ts';
import {
  createLifecycleMetrics,
  createViolationAlerts,
  externalUrl,
  httpServerConfigSchema,
  startHttpServer,
  violationAlertsConfigSchema,
} from '../dashboards/index.ts';
import { spanTimeKeys, type SpanQueue } from '../contract/index.ts';
import { SCENARIO_NAMES } from '../emitter/index.ts';
import { loadFlagThresholds, openReadClient } from '../queries/index.ts';
import {
  clickHouseConnection,
  createPipelineMetrics,
  createWriter,
  InProcessQueue,
  openStorage,
  Pipeline,
  type PipelineMetrics,
  type StorageConfig,
  pipelineConfigSchema,
  storageConfigSchema,
  writerConfigSchema,
} from '../pipeline/index.ts';
import { simulateCommand } from './simulate.ts';

export const startConfigSchema = z.object({
  otlpPort: collectorConfigSchema.shape.port,
  /**
   * 127.0.0.1: the all-in-one is what a newcomer runs on a laptop, and its ports take spans and show them without a
   * token unless one is set. Engines on other hosts need `--otlp-host 0.0.0.0` (and a token).
   */
  otlpHost: key(z.string().min(1).default('127.0.0.1'), {
    help: 'listen address of the OTLP/HTTP port',
    env: 'HOLDSCOPE_OTLP_HOST',
    placeholder: 'address',
  }),
  httpPort: httpServerConfigSchema.shape.httpPort,
  /** 127.0.0.1, as the OTLP port. */
  httpHost: key(z.string().min(1).default('127.0.0.1'), {
    help: 'listen address of the HTTP port',
    env: 'HOLDSCOPE_HTTP_HOST',
    placeholder: 'address',
  }),
  simulate: key(z.boolean().default(true), { help: 'do not run simulated engines; only receive' }),
  scenario: key(z.enum(SCENARIO_NAMES).default('mixed'), { help: 'scenario of the simulated engines', placeholder: 'name' }),
  /** Request ids are s<seed>-NNNNNN; a new seed each run, so that runs on one data directory never share ids. */
  seed: key(z.coerce.number().int().min(0).optional(), {
    help: 'seed of the simulated engines (default: a new one each run)',
    placeholder: 'n',
  }),
  /** Everything `start` keeps on disk lives here: embedded ClickHouse under DIR/clickhouse. */
  data: key(z.string().min(1).default('.data'), {
    help: 'data directory (embedded ClickHouse lives in DIR/clickhouse)',
    placeholder: 'dir',
  }),
  shutdownTimeoutMs: shutdownTimeoutMs(),
  externalUrl: externalUrl(),
  ...violationAlertsConfigSchema.shape,
  ...spanTimeKeys,
});

/** An address this process can send to on a port bound to `host` (the wildcard addresses are not). */
const reachable = (host: string) => (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host);

/**
 * Where the collector's spans go: through Kafka to a pipeline when KAFKA_BROKERS is set, else through an in-process
 * queue into the writer, with the collector's own bound and timeout.
 */
async function startIngest(
  collectorConfig: CollectorConfig,
  storage: StorageConfig,
  time: { maxClockSkewMs: number; retentionDays: number },
  {
    client,
    metrics,
    log,
    onRecordsStored,
  }: { client: ClickHouseClient; metrics: PipelineMetrics; log: Logger; onRecordsStored: () => void },
): Promise<{ pipeline?: Pipeline; queue?: SpanQueue }> {
  if (collectorConfig.kafkaBrokers.length > 0) {
    const pipeline = new Pipeline(loadConfig(pipelineConfigSchema, { data: storage.data, ...time }), {
      log,
      metrics,
      client,
      onRecordsStored,
    });
    await pipeline.start();
    log.info({ kafkaBrokers: collectorConfig.kafkaBrokers }, 'spans go through Kafka (KAFKA_BROKERS)');
    return { pipeline };
  }
  const writer = createWriter(client, { database: storage.database, ...loadConfig(writerConfigSchema, {}), onRecordsStored }, metrics, log);
  log.info(
    'no KAFKA_BROKERS: spans go from the collector to ClickHouse through an in-process queue (acknowledged once stored; ' +
      'nothing buffers them while ClickHouse is down, so senders retry). Set KAFKA_BROKERS to run through Kafka.',
  );
  return {
    queue: new InProcessQueue(writer, {
      maxPendingSpans: collectorConfig.maxPendingSpans,
      timeoutMs: collectorConfig.produceTimeoutMs,
      metrics,
      log,
    }),
  };
}

/**
 * `holdscope start` (what `npm start` runs): collector, pipeline, read API and simulated engines in one
 * process on embedded ClickHouse. With KAFKA_BROKERS set, spans go through Kafka; otherwise through an
 * in-process queue with the same bound and acknowledgement (a 200 means ClickHouse has the spans).
 * The collector, storage and HTTP port read the same environment variables as their own commands.
 */
// eslint-disable-next-line max-lines-per-function -- the start-up and shutdown order of every part of the all-in-one, read top to bottom
export async function startCommand(flags: Record<string, unknown>): Promise<void> {
  const options = loadConfig(startConfigSchema, flags);
  const time = { maxClockSkewMs: options.maxClockSkewMs, retentionDays: options.retentionDays };
  const collectorConfig = loadConfig(collectorConfigSchema, { port: options.otlpPort, host: options.otlpHost, ...time });
  const {
    httpPort,
    httpHost,
    httpToken,
    externalUrl: pagesUrl,
    ...readLimits
  } = loadConfig(httpServerConfigSchema, {
    httpPort: options.httpPort,
    httpHost: options.httpHost,
    externalUrl: options.externalUrl,
  });
  const storage = loadConfig(storageConfigSchema, { data: join(options.data, 'clickhouse'), retentionDays: options.retentionDays });
  const log = createLogger('start');
  const client = await openStorage(storage, log);
  const metrics = createPipelineMetrics();
  // Reads get a connection of their own: on embedded ClickHouse a query waits for the one before it on its connection,
  // so the pages, gauges and violation lookups would otherwise hold the collector's INSERTs back for as long as they run.
  const readClient = await openReadClient(clickHouseConnection(storage));
  // Each stored batch of records nudges the violation push (a no-op until it starts, and without an Alertmanager).
  const violationAlerts = createViolationAlerts({
    config: options,
    externalUrl: pagesUrl,
    client: readClient,
    database: storage.database,
    readLimits,
    log,
  });
  const onRecordsStored = () => violationAlerts.nudge();
  const { pipeline, queue } = await startIngest(collectorConfig, storage, time, { client, metrics, log, onRecordsStored });
  const collector = new Collector(collectorConfig, { log, queue });
  let accepting = false;
  const flagThresholds = loadFlagThresholds();
  const lifecycleMetrics = createLifecycleMetrics({
    client: readClient,
    database: storage.database,
    log,
    thresholds: flagThresholds,
    readLimits,
  });
  lifecycleMetrics.start();
  violationAlerts.start();
  const metricsRegistry = Registry.merge([
    lifecycleMetrics.registry,
    violationAlerts.registry,
    metrics.registry,
    collector.metrics.registry,
  ]);
  const http = await startHttpServer({
    port: httpPort,
    host: httpHost,
    client: readClient,
    database: storage.database,
    log,
    readiness: () => ({ ready: accepting && collector.queue.healthy() }),
    authToken: httpToken,
    metricsRegistry,
    flagThresholds,
    readLimits,
  });
  const otlpPort = await collector.start();
  accepting = true;
  log.info(
    {
      otlp: `http://${options.otlpHost}:${otlpPort}/v1/traces`,
      http: `http://${options.httpHost}:${http.port}/`,
      collectorToken: collectorConfig.authToken ? 'required' : 'none',
      httpToken: httpToken ? 'required' : 'none',
      data: storage.data,
    },
    'holdscope is running',
  );
  log.info({ otlpPort, httpPort: http.port }, 'ports');

  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    if (options.simulate) {
      // The simulated engines send the collector's token (HOLDSCOPE_COLLECTOR_TOKEN) as real engines must.
      await simulateCommand(
        {
          scenario: options.scenario,
          seed: options.seed ?? Date.now() % 1_000_000,
          endpoint: `http://${reachable(options.otlpHost)}:${otlpPort}`,
          pace: 'realtime',
          duration: 7 * 24 * 3600,
        },
        controller.signal,
      );
    } else {
      await new Promise<void>((resolve) => controller.signal.addEventListener('abort', () => resolve()));
    }
  } finally {
    // Bounded whatever ClickHouse or Kafka are doing. Without Kafka the writer stops first: its retries end at once, so
    // senders waiting on a ClickHouse outage are answered 503 now rather than at their timeout, and the collector's stop
    // then waits for nobody. A sender is told 200 only for stored spans.
    await stopOrExit(log, options.shutdownTimeoutMs, async (waitingFor) => {
      lifecycleMetrics.stop();
      const alertsStopping = () => 'the violation push (a lookup or a POST to Alertmanager being aborted)';
      waitingFor.add(alertsStopping);
      await violationAlerts.shutdown();
      waitingFor.delete(alertsStopping);
      const collectorStopping = () => 'the collector (requests in progress) and, without Kafka, the ClickHouse writer';
      waitingFor.add(collectorStopping);
      await queue?.shutdown();
      await collector.shutdown();
      waitingFor.delete(collectorStopping);
      await pipeline?.shutdown(waitingFor);
      await http.close();
      await readClient.close();
      await client.close();
    });
  }
}
