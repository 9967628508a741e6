import { Collector, loadCollectorConfig } from '../collector/index.ts';
import { createLogger } from '../common/index.ts';

/** `holdscope collector`: the OTLP/HTTP receiver producing to Kafka, until SIGINT/SIGTERM. */
export async function collectorCommand(flags: Record<string, unknown>): Promise<void> {
  const config = loadCollectorConfig(flags);
  const log = createLogger('collector');
  const collector = new Collector(config, { log });
  await collector.start();
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('shutting down: draining spans to Kafka');
  await collector.shutdown();
}
