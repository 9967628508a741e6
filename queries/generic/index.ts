// The generic stack (the OpenTelemetry Collector ClickHouse exporter's otel_traces) and the on-call questions asked
// of it: for the comparison tests and the bench, not for holdscope's own reads.
export {
  createOtelTraces,
  fillOtelTracesFromSpans,
  GENERIC_QUESTION_NAMES,
  GENERIC_QUESTIONS,
  runGenericQuestion,
  stormPeaks,
  type GenericQuestion,
  type StormPeak,
} from './otel-traces.ts';
