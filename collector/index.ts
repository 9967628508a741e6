export { Collector } from './collector.ts';
export { collectorConfigSchema, loadCollectorConfig, COLLECTOR_ENV, type CollectorConfig } from './config.ts';
export { KafkaSpanQueue, type SpanQueue, type KafkaSpanQueueOptions } from './span-queue.ts';
export { triage, MESSAGE_HEADERS, type SpanMessage, type DeadLetter, type Triage } from './messages.ts';
export { createCollectorMetrics, type CollectorMetrics } from './metrics.ts';
export { startOtlpReceiver, type OtlpReceiver } from './otlp-receiver.ts';
