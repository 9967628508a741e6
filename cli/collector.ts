import { Collector, loadCollectorConfig } from '../collector/index.ts';
import { createLogger, stopOrExit, waitForSignal } from '../common/index.ts';

/** `holdscope collector`: the OTLP/HTTP receiver producing to Kafka, until SIGINT/SIGTERM. */
export async function collectorCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadCollectorConfig(flags);
  const log = createLogger('collector');
  const collector = new Collector(config, { log });
  await collector.start();
  await waitForSignal();
  // Requests under way get their answer; spans already accepted are drained to Kafka first.
  await stopOrExit(log, config.shutdownTimeoutMs, () => collector.shutdown());
}
