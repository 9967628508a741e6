import { createHttpApp, createLogger, listen, loadConfig, stopOrExit, waitForSignal } from '../common/index.ts';
import { clickHouseConnection, migrate, Pipeline, pipelineConfigSchema, storageConfigSchema } from '../pipeline/index.ts';
import { createClickHouse } from '../common/index.ts';
import { shutdownTimeoutMs } from '../common/config.ts';
import { createLifecycleMetrics, httpServerConfigSchema, startHttpServer } from '../dashboards/index.ts';
import { loadFlagThresholds, openReadClient } from '../queries/index.ts';

/** `holdscope pipeline`: consume Kafka into ClickHouse; /metrics, /healthz and /readyz on --metrics-port. */
export async function pipelineCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(pipelineConfigSchema, flags);
  const log = createLogger('pipeline');
  const pipeline = new Pipeline(config, { log });
  await pipeline.start();
  const { app, finish } = createHttpApp({ log, metricsRegistry: pipeline.metrics.registry, readiness: () => pipeline.readiness() });
  finish();
  const metricsServer = await listen(app, config.metricsPort, config.metricsHost);
  await waitForSignal();
  await stopOrExit(log, config.shutdownTimeoutMs, async (waitingFor) => {
    await metricsServer.close('now');
    await pipeline.shutdown(waitingFor);
  });
}

/** `holdscope migrate`: create or upgrade the schema, then exit. */
export async function migrateCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(storageConfigSchema, flags);
  const log = createLogger('migrate');
  const client = await createClickHouse(clickHouseConnection(config));
  try {
    const { applied } = await migrate(
      client,
      { database: config.database, cluster: config.clickhouseCluster, retentionDays: config.retentionDays },
      log,
    );
    process.stdout.write(applied.length > 0 ? `applied ${applied.join(', ')}\n` : 'schema up to date\n');
  } finally {
    await client.close();
  }
}

/** `holdscope serve`'s configuration: where ClickHouse is, the HTTP port, and how long a stop may take. */
export const serveConfigSchema = storageConfigSchema
  .extend(httpServerConfigSchema.shape)
  .extend({ shutdownTimeoutMs: shutdownTimeoutMs() });

/** `holdscope serve`: the pages, read API and /metrics over an existing database. */
export async function serveCommand(flags: Record<string, unknown>): Promise<void> {
  const { httpPort, httpHost, httpToken, shutdownTimeoutMs, ...rest } = loadConfig(serveConfigSchema, flags);
  const { maxReadWindowMs, maxReadSeconds, maxReadMemoryBytes, maxConcurrentReads, maxQueuedReads, ...storage } = rest;
  const readLimits = { maxReadWindowMs, maxReadSeconds, maxReadMemoryBytes, maxConcurrentReads, maxQueuedReads };
  const log = createLogger('serve');
  // serve only reads: one client for the pages, the API and the gauges, with the reads' own queue.
  const client = await openReadClient(clickHouseConnection(storage));
  await migrate(client, { database: storage.database, cluster: storage.clickhouseCluster, retentionDays: storage.retentionDays }, log);
  const flagThresholds = loadFlagThresholds();
  const lifecycleMetrics = createLifecycleMetrics({ client, database: storage.database, log, thresholds: flagThresholds, readLimits });
  lifecycleMetrics.start();
  const server = await startHttpServer({
    port: httpPort,
    host: httpHost,
    client,
    database: storage.database,
    log,
    authToken: httpToken,
    metricsRegistry: lifecycleMetrics.registry,
    flagThresholds,
    readLimits,
  });
  log.info({ url: `http://${httpHost}:${server.port}/`, token: httpToken ? 'required' : 'none' }, 'serving');
  await waitForSignal();
  await stopOrExit(log, shutdownTimeoutMs, async () => {
    lifecycleMetrics.stop();
    await server.close();
    await client.close();
  });
}
