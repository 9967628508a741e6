import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** The collector's Prometheus metrics, on a registry of its own so several collectors can share a process. */
export function createCollectorMetrics(registry = new Registry()) {
  const m = {
    registry,
    requests: new Counter({
      name: 'holdscope_collector_requests_total',
      help: 'OTLP requests by HTTP status',
      labelNames: ['status'],
      registers: [registry],
    }),
    spansReceived: new Counter({
      name: 'holdscope_collector_spans_received_total',
      help: 'Spans decoded from OTLP requests',
      registers: [registry],
    }),
    spansAccepted: new Counter({
      name: 'holdscope_collector_spans_accepted_total',
      help: 'PD spans answered 200: stored in Kafka, or in ClickHouse where no Kafka is configured (holdscope start)',
      registers: [registry],
    }),
    spansRejected: new Counter({
      name: 'holdscope_collector_spans_rejected_total',
      help: 'PD spans rejected by the contract validator, by offending field',
      labelNames: ['field'],
      registers: [registry],
    }),
    spansNotOurs: new Counter({
      name: 'holdscope_collector_spans_not_ours_total',
      help: 'Spans outside the pd. namespace, dropped',
      registers: [registry],
    }),
    spansRefused: new Counter({
      name: 'holdscope_collector_spans_refused_total',
      help: 'Spans answered with 429/503 (the sender retries them), by reason',
      labelNames: ['reason'],
      registers: [registry],
    }),
    deadLetters: new Counter({
      name: 'holdscope_collector_dead_letters_total',
      help: 'Rejected spans written to the dead-letter topic',
      registers: [registry],
    }),
    produceRetries: new Counter({
      name: 'holdscope_collector_produce_failures_total',
      help: 'Kafka sends that failed (their requests were answered 503)',
      registers: [registry],
    }),
    produceSeconds: new Histogram({
      name: 'holdscope_collector_produce_duration_seconds',
      help: 'Time from a batch being sent to Kafka acknowledging it',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    pendingSpans: new Gauge({
      name: 'holdscope_collector_pending_spans',
      help: 'Spans accepted and waiting for Kafka',
      registers: [registry],
    }),
    kafkaUp: new Gauge({
      name: 'holdscope_collector_kafka_up',
      help: '1 while Kafka takes spans: connected, and no send failed or timed out since it last answered',
      registers: [registry],
    }),
  };
  return m;
}

export type CollectorMetrics = ReturnType<typeof createCollectorMetrics>;
