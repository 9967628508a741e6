export { Pipeline, openStorage, createWriter, InProcessQueue } from './pipeline.ts';
export { pipelineConfigSchema, storageConfigSchema, loadConfig, type PipelineConfig, type StorageConfig } from './config.ts';
export { migrate, loadMigrations, type SchemaOptions } from './migrate.ts';
export { createPipelineMetrics, type PipelineMetrics } from './metrics.ts';
export { SpanWriter } from './writer.ts';
export { decodeMessage, eventsOf } from './decode.ts';
export { spanRow, formatNanos, type SpanRow } from './rows.ts';
export { encodeRows, encodeSpanLine, SPAN_COLUMNS, TSV_INSERT_SETTINGS, type EncodedRows } from './encode.ts';
export { refreshLifecycleRecords, rebuildLifecycleRecords, type LifecycleKey } from './records.ts';
