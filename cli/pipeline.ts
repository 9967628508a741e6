import { Registry } from 'prom-client';
import { createHttpApp, createLogger, listen, loadConfig, stopOrExit, waitForSignal } from '../common/index.ts';
import { clickHouseConnection, migrateStorage, Pipeline, pipelineConfigSchema, storageConfigSchema } from '../pipeline/index.ts';
import { createClickHouse } from '../common/index.ts';
import { shutdownTimeoutMs } from '../common/config.ts';
import {
  createLifecycleMetrics,
  createViolationAlerts,
  httpServerConfigSchema,
  startHttpServer,
  violationAlertsConfigSchema,
} from '../dashboards/index.ts';
import { loadFlagThresholds, openReadClient } from '../queries/index.ts';

/**
 * `holdscope pipeline`'s configuration: the pipeline's, and the violation push, which lives where records are stored so
 * that an alert leaves as soon as the record that carries it is (the writer nudges it), not at a reader's next poll.
 */
export const pipelineCommandSchema = pipelineConfigSchema
  .extend(violationAlertsConfigSchema.shape)
  .extend({ externalUrl: httpServerConfigSchema.shape.externalUrl });

/** `holdscope pipeline`: consume Kafka into ClickHouse; /metrics, /healthz and /readyz on --metrics-port. */
export async function pipelineCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(pipelineCommandSchema, flags);
  const log = createLogger('pipeline');
  // The push's lookups are reads: a client and queue of their own, so they never wait behind the writer's INSERTs.
  const readClient = await openReadClient(clickHouseConnection(config));
  const violationAlerts = createViolationAlerts({
    config,
    externalUrl: config.externalUrl,
    client: readClient,
    database: config.database,
    log,
  });
  const pipeline = new Pipeline(config, { log, onRecordsStored: () => violationAlerts.nudge() });
  await pipeline.start();
  violationAlerts.start();
  const { app, finish } = createHttpApp({
    log,
    metricsRegistry: Registry.merge([pipeline.metrics.registry, violationAlerts.registry]),
    readiness: () => pipeline.readiness(),
  });
  finish();
  const metricsServer = await listen(app, config.metricsPort, config.metricsHost);
  await waitForSignal();
  await stopOrExit(log, config.shutdownTimeoutMs, async (waitingFor) => {
    await violationAlerts.shutdown();
    await metricsServer.close('now');
    await pipeline.shutdown(waitingFor);
    await readClient.close();
  });
}

/** `holdscope migrate`: create or upgrade the schema, then exit. */
export async function migrateCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(storageConfigSchema, flags);
  const log = createLogger('migrate');
  const client = await createClickHouse(clickHouseConnection(config));
  try {
    const { applied } = await migrateStorage(client, config, log);
    process.stdout.write(applied.length > 0 ? `applied ${applied.join(', ')}\n` : 'schema up to date\n');
  } finally {
    await client.close();
  }
}

/** `holdscope serve`'s configuration: where ClickHouse is, the HTTP port, the violation push, and how long a stop may take. */
export const serveConfigSchema = storageConfigSchema
  .extend(httpServerConfigSchema.shape)
  .extend(violationAlertsConfigSchema.shape)
  .extend({ shutdownTimeoutMs: shutdownTimeoutMs() });

/** `holdscope serve`: the pages, read API and /metrics over an existing database. */
export async function serveCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(serveConfigSchema, flags);
  const { httpPort, httpHost, httpToken, shutdownTimeoutMs, externalUrl, ...rest } = config;
  const { maxReadWindowMs, maxReadSeconds, maxReadMemoryBytes, maxConcurrentReads, maxQueuedReads, ...storage } = rest;
  const readLimits = { maxReadWindowMs, maxReadSeconds, maxReadMemoryBytes, maxConcurrentReads, maxQueuedReads };
  const log = createLogger('serve');
  // serve only reads: one client for the pages, the API and the gauges, with the reads' own queue.
  const client = await openReadClient(clickHouseConnection(storage));
  await migrateStorage(client, storage, log);
  const flagThresholds = loadFlagThresholds();
  const lifecycleMetrics = createLifecycleMetrics({ client, database: storage.database, log, thresholds: flagThresholds, readLimits });
  lifecycleMetrics.start();
  // serve is a process of its own: no writer nudges it, so the push polls (alertPollMs).
  const violationAlerts = createViolationAlerts({
    config,
    externalUrl,
    client,
    database: storage.database,
    readLimits,
    log,
  });
  violationAlerts.start();
  const server = await startHttpServer({
    port: httpPort,
    host: httpHost,
    client,
    database: storage.database,
    log,
    authToken: httpToken,
    metricsRegistry: Registry.merge([lifecycleMetrics.registry, violationAlerts.registry]),
    flagThresholds,
    readLimits,
  });
  log.info({ url: `http://${httpHost}:${server.port}/`, token: httpToken ? 'required' : 'none' }, 'serving');
  await waitForSignal();
  await stopOrExit(log, shutdownTimeoutMs, async () => {
    lifecycleMetrics.stop();
    await violationAlerts.shutdown();
    await server.close();
    await client.close();
  });
}
