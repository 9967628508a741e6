import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** The pipeline's own health, as Prometheus metrics. */
// eslint-disable-next-line max-lines-per-function -- declares every pipeline metric, one after another
export function createPipelineMetrics(registry = new Registry()) {
  return {
    registry,
    messages: new Counter({ name: 'holdscope_pipeline_messages_total', help: 'Kafka messages consumed', registers: [registry] }),
    undecodable: new Counter({
      name: 'holdscope_pipeline_undecodable_messages_total',
      help: 'Messages that are not OTLP traces (skipped)',
      registers: [registry],
    }),
    invalidSpans: new Counter({
      name: 'holdscope_pipeline_invalid_spans_total',
      help: 'PD spans that break the contract, by field',
      labelNames: ['field'],
      registers: [registry],
    }),
    notOurs: new Counter({
      name: 'holdscope_pipeline_spans_not_ours_total',
      help: 'Spans outside the pd. namespace (skipped)',
      registers: [registry],
    }),
    rowsInserted: new Counter({
      name: 'holdscope_pipeline_rows_inserted_total',
      help: 'Span rows acknowledged by ClickHouse',
      registers: [registry],
    }),
    insertFailures: new Counter({
      name: 'holdscope_pipeline_insert_failures_total',
      help: 'Failed INSERTs of spans (and of dead letters) and record refreshes, by whether ClickHouse called the failure transient; retried, except INSERTs of rows ClickHouse refused (then split, see holdscope_pipeline_dead_letter_rows_total)',
      labelNames: ['retriable'],
      registers: [registry],
    }),
    deadLetterRows: new Counter({
      name: 'holdscope_pipeline_dead_letter_rows_total',
      help: 'Span rows ClickHouse refused for their content, stored in span_dead_letters instead of spans, by ClickHouse error code and name (a batch read again after a crash counts its rows again)',
      labelNames: ['code', 'error'],
      registers: [registry],
    }),
    insertSeconds: new Histogram({
      name: 'holdscope_pipeline_insert_duration_seconds',
      help: 'Time ClickHouse took to acknowledge an INSERT',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    refreshSeconds: new Histogram({
      name: 'holdscope_pipeline_record_refresh_duration_seconds',
      help: 'Time ClickHouse took to recompute the lifecycle records of an inserted batch',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    rowsPending: new Gauge({ name: 'holdscope_pipeline_rows_pending', help: 'Rows waiting for ClickHouse', registers: [registry] }),
    inFlightBytes: new Gauge({
      name: 'holdscope_pipeline_in_flight_bytes',
      help: 'Encoded span rows the Kafka consumer handed to the writer and ClickHouse has not acknowledged yet, in bytes (capped: past the cap the consumer waits)',
      registers: [registry],
    }),
    lastInsert: new Gauge({
      name: 'holdscope_pipeline_last_insert_timestamp_seconds',
      help: 'Unix time of the last successful INSERT',
      registers: [registry],
    }),
    commits: new Counter({
      name: 'holdscope_pipeline_offset_commits_total',
      help: 'Kafka offset commits after ClickHouse acknowledged',
      registers: [registry],
    }),
    commitsRefused: new Counter({
      name: 'holdscope_pipeline_offset_commits_refused_total',
      help: 'Offset commits the consumer group refused, mostly during a rebalance (the batch is stored; it is read again), by kafkajs error type',
      labelNames: ['reason'],
      registers: [registry],
    }),
    consumerLag: new Gauge({
      name: 'holdscope_pipeline_consumer_lag_messages',
      help: 'Messages in the topic not yet committed by the consumer group (sampled every 15 s)',
      labelNames: ['topic'],
      registers: [registry],
    }),
    consumerRestarts: new Counter({
      name: 'holdscope_pipeline_consumer_restarts_total',
      help: 'Consumers recreated after a crash kafkajs does not recover from by itself, by kafkajs error type (or name)',
      labelNames: ['reason'],
      registers: [registry],
    }),
  };
}

export type PipelineMetrics = ReturnType<typeof createPipelineMetrics>;
