import { join } from 'node:path';
import { z } from 'zod';
import { Collector, collectorConfigSchema, type SpanQueue } from '../collector/index.ts';
import { parseConfig, port } from '../common/config.ts';
import { createLogger } from '../common/index.ts';
import { Registry } from 'prom-client';
import { createLifecycleMetrics, startHttpServer } from '../dashboards/index.ts';
import { loadFlagThresholds } from '../queries/index.ts';
import { SCENARIO_NAMES } from '../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue, loadConfig, openStorage, Pipeline, pipelineConfigSchema, storageConfigSchema } from '../pipeline/index.ts';
import { flagName, simulateCommand } from './simulate.ts';

const startSchema = z.object({
  otlpPort: port().default(4318),
  httpPort: port().default(8080),
  simulate: z.boolean().default(true),
  scenario: z.enum(SCENARIO_NAMES).default('mixed'),
  /** Seed of the simulated engines (request ids are s<seed>-NNNNNN); by default a new one each run. */
  seed: z.coerce.number().int().min(0).optional(),
  /** Everything `start` keeps on disk lives here: embedded ClickHouse under data/clickhouse. */
  data: z.string().min(1).default('.data'),
});

/**
 * `holdscope start` (what `npm start` runs): collector, pipeline, read API and simulated engines in one
 * process on embedded ClickHouse. With KAFKA_BROKERS set, spans go through Kafka; otherwise through an
 * in-process queue with the same bound and acknowledgement (a 200 means ClickHouse has the spans).
 */
export async function startCommand(raw: Record<string, unknown>): Promise<void> {
  const options = parseConfig(startSchema, raw, flagName);
  const log = createLogger('start');
  const kafkaBrokers = process.env.KAFKA_BROKERS;
  const storage = loadConfig(storageConfigSchema, { data: join(options.data, 'clickhouse') });
  const client = await openStorage(storage, log);
  const metrics = createPipelineMetrics();
  let pipeline: Pipeline | undefined;
  let queue: SpanQueue | undefined;
  if (kafkaBrokers) {
    pipeline = new Pipeline(loadConfig(pipelineConfigSchema, { data: storage.data }), { log, metrics, client });
    await pipeline.start();
    log.info({ kafkaBrokers }, 'spans go through Kafka (KAFKA_BROKERS)');
  } else {
    const writer = createWriter(client, { database: storage.database, maxBatchRows: 50_000, lingerMs: 100 }, metrics, log);
    queue = new InProcessQueue(writer, { maxPendingSpans: 200_000, timeoutMs: 10_000, metrics, log });
    log.info(
      'no KAFKA_BROKERS: spans go from the collector to ClickHouse through an in-process queue (acknowledged once stored; ' +
        'nothing buffers them while ClickHouse is down, so senders retry). Set KAFKA_BROKERS to run through Kafka.',
    );
  }
  const collectorConfig = collectorConfigSchema.parse({ port: options.otlpPort, host: '0.0.0.0', kafkaBrokers: kafkaBrokers || undefined });
  const collector = new Collector(collectorConfig, { log, queue });
  let accepting = false;
  // HOLDSCOPE_HTTP_TOKEN, when set, is required on every request of the HTTP port (pages and API).
  const authToken = process.env.HOLDSCOPE_HTTP_TOKEN || undefined;
  const flagThresholds = loadFlagThresholds();
  const lifecycleMetrics = createLifecycleMetrics({ client, database: storage.database, log, thresholds: flagThresholds });
  lifecycleMetrics.start();
  const metricsRegistry = Registry.merge([lifecycleMetrics.registry, metrics.registry, collector.metrics.registry]);
  const http = await startHttpServer({ port: options.httpPort, host: '0.0.0.0', client, database: storage.database, log, ready: () => accepting, authToken, metricsRegistry, flagThresholds });
  const otlpPort = await collector.start();
  accepting = true;
  log.info(
    { otlp: `http://127.0.0.1:${otlpPort}/v1/traces`, http: `http://127.0.0.1:${http.port}/`, lifecycles: `http://127.0.0.1:${http.port}/api/lifecycles/REQUEST_ID`, data: storage.data },
    'holdscope is running',
  );
  log.info(
    { otlpPort, httpPort: http.port },
    'ports',
  );

  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    if (options.simulate) {
      await simulateCommand(
        { scenario: options.scenario, seed: options.seed ?? Date.now() % 1_000_000, endpoint: `http://127.0.0.1:${otlpPort}`, pace: 'realtime', duration: 7 * 24 * 3600 },
        controller.signal,
      );
    } else {
      await new Promise<void>((resolve) => controller.signal.addEventListener('abort', () => resolve()));
    }
  } finally {
    log.info('shutting down');
    lifecycleMetrics.stop();
    await collector.shutdown();
    await pipeline?.shutdown();
    await queue?.flush();
    await http.close();
    await client.close();
  }
}
