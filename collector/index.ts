export { Collector } from './collector.ts';
export { collectorConfigSchema, loadCollectorConfig, type CollectorConfig } from './config.ts';
export { BATCH_OVERHEAD_BYTES, recordBytes } from './messages.ts';
export { mergeByPartition } from './partitions.ts';
