export { Pipeline, openStorage, createWriter, InProcessQueue } from './pipeline.ts';
export {
  clickHouseConnection,
  pipelineConfigSchema,
  storageConfigSchema,
  writerConfigSchema,
  type PipelineConfig,
  type StorageConfig,
} from './config.ts';
export { migrate, migrateStorage, type SchemaOptions } from './migrate.ts';
export { createPipelineMetrics, type PipelineMetrics } from './metrics.ts';
export { SpanWriter } from './writer.ts';
export { fetchByteLimits } from './kafka-source.ts';
export { eventsOf } from './decode.ts';
export { spanRow, type SpanRow } from './rows.ts';
export { encodeRows, SPAN_COLUMNS, TSV_INSERT_SETTINGS, type EncodedRows, type NativeRows } from './encode.ts';
export { NativeRowsBuilder, nativeSpanInsert } from './native.ts';
export { rebuildLifecycleRecords } from './records.ts';
