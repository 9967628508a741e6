import { createServer } from 'node:http';
import { createLogger } from '../common/index.ts';
import { loadConfig, migrate, Pipeline, pipelineConfigSchema, storageConfigSchema, openStorage } from '../pipeline/index.ts';
import { createClickHouse } from '../common/index.ts';
import { createLifecycleMetrics, startHttpServer } from '../dashboards/index.ts';
import { loadFlagThresholds } from '../queries/index.ts';

const waitForSignal = () =>
  new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });

/** `holdscope pipeline`: consume Kafka into ClickHouse; metrics on --metrics-port. */
export async function pipelineCommand(flags: Record<string, unknown>): Promise<void> {
  const { metricsPort, ...rest } = flags;
  const config = loadConfig(pipelineConfigSchema, rest);
  const log = createLogger('pipeline');
  const pipeline = new Pipeline(config, { log });
  await pipeline.start();
  const metricsServer = createServer((req, res) => {
    if (req.url === '/metrics') {
      void pipeline.metrics.registry.metrics().then((text) => res.writeHead(200, { 'content-type': pipeline.metrics.registry.contentType }).end(text));
    } else res.writeHead(req.url === '/healthz' ? 200 : 404, { 'content-type': 'application/json' }).end('{}');
  });
  metricsServer.listen(Number(metricsPort ?? 9465));
  await waitForSignal();
  log.info({ shutdownTimeoutMs: config.shutdownTimeoutMs }, 'shutting down');
  metricsServer.close();
  const outcome = await stopWithin(config.shutdownTimeoutMs, (waitingFor) => pipeline.shutdown(waitingFor));
  if (!outcome.stopped) {
    // Nothing is lost by leaving now: offsets are committed only after ClickHouse has the rows, so batches in hand
    // are read again by the partitions' next owner.
    log.error(
      { shutdownTimeoutMs: config.shutdownTimeoutMs, waitingFor: outcome.waitingFor },
      `shutdown did not finish within ${config.shutdownTimeoutMs} ms; exiting anyway, still waiting for: ${outcome.waitingFor.join('; ') || 'nothing known'}`,
    );
    process.exit(1);
  }
}

/**
 * Runs `stop`, giving up after `ms`: then says what it was still waiting for (the entries `stop` keeps in the set it is
 * given, see Pipeline.shutdown). A stop that fails within the deadline rejects.
 */
export async function stopWithin(ms: number, stop: (waitingFor: Set<() => string>) => Promise<void>): Promise<{ stopped: true } | { stopped: false; waitingFor: string[] }> {
  const waitingFor = new Set<() => string>();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), ms);
  });
  try {
    const first = await Promise.race([stop(waitingFor).then(() => 'stopped' as const), deadline]);
    if (first === 'stopped') return { stopped: true };
    return { stopped: false, waitingFor: [...waitingFor].map((describe) => describe()) };
  } finally {
    clearTimeout(timer);
  }
}

/** `holdscope migrate`: create or upgrade the schema, then exit. */
export async function migrateCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadConfig(storageConfigSchema, flags);
  const log = createLogger('migrate');
  const client = await createClickHouse({ url: config.clickhouseUrl, user: config.clickhouseUser, password: config.clickhousePassword, dataPath: config.data });
  try {
    const { applied } = await migrate(client, { database: config.database, cluster: config.clickhouseCluster, retentionDays: config.retentionDays }, log);
    process.stdout.write(applied.length > 0 ? `applied ${applied.join(', ')}\n` : 'schema up to date\n');
  } finally {
    await client.close();
  }
}

/** `holdscope serve`: the read API (and later the on-call pages) over an existing database. */
export async function serveCommand(flags: Record<string, unknown>): Promise<void> {
  const { httpPort, ...rest } = flags;
  const config = loadConfig(storageConfigSchema, rest);
  const log = createLogger('serve');
  const client = await openStorage(config, log);
  // HOLDSCOPE_HTTP_TOKEN, when set, is required on every request (pages and API).
  const flagThresholds = loadFlagThresholds();
  const lifecycleMetrics = createLifecycleMetrics({ client, database: config.database, log, thresholds: flagThresholds });
  lifecycleMetrics.start();
  const server = await startHttpServer({
    port: Number(httpPort ?? 8080),
    host: '0.0.0.0',
    client,
    database: config.database,
    log,
    authToken: process.env.HOLDSCOPE_HTTP_TOKEN || undefined,
    metricsRegistry: lifecycleMetrics.registry,
    flagThresholds,
  });
  log.info({ url: `http://127.0.0.1:${server.port}/` }, 'serving');
  await waitForSignal();
  lifecycleMetrics.stop();
  await server.close();
  await client.close();
}
