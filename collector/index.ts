export { Collector } from './collector.ts';
export { collectorConfigSchema, loadCollectorConfig, type CollectorConfig } from './config.ts';
