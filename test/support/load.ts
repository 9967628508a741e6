import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { buildScenario, runSimulation, type ScenarioName, type SimConfig, type SimulationSummary } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue, migrate } from '../../pipeline/index.ts';
import { quietLog } from './stack.ts';

/**
 * Runs a scenario through the real collector and writer into `database` (the in-process queue of
 * `holdscope start`, no Kafka), for tests about what is stored rather than how it travels.
 */
export async function loadScenario(
  client: ClickHouseClient,
  database: string,
  name: ScenarioName,
  seed: number,
  adjust: (config: SimConfig) => void = () => undefined,
  startTimeMs = Date.now() - 3_600_000,
): Promise<SimulationSummary & { startTimeMs: number }> {
  await migrate(client, { database, retentionDays: 30 });
  const metrics = createPipelineMetrics();
  const writer = createWriter(client, { database, maxBatchRows: 50_000, lingerMs: 20 }, metrics, quietLog);
  const queue = new InProcessQueue(writer, { maxPendingSpans: 1_000_000, timeoutMs: 60_000, metrics, log: quietLog });
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  try {
    const scenario = buildScenario(name, seed);
    scenario.config.idPrefix = `${name}-${seed}`;
    adjust(scenario.config);
    const summary = await runSimulation({ config: scenario.config, endpoint: `http://127.0.0.1:${port}`, startTimeMs, pace: 'fast' });
    if (summary.spansFailed > 0) throw new Error(`${summary.spansFailed} spans failed to export`);
    await writer.flush();
    return { ...summary, startTimeMs };
  } finally {
    await collector.shutdown();
  }
}
