export { formatStringListText } from './list-text.ts';
export {
  listQueries,
  getQuery,
  bindParams,
  runQuery,
  runQueryCapped,
  parseQueryFile,
  QUERY_CHANNEL,
  type QueryDefinition,
  type QueryFinished,
  type QueryParam,
  type ParamValue,
  type ReadOptions,
} from './runner.ts';
export {
  DEFAULT_READ_LIMITS,
  describeDuration,
  parseReadTime,
  queryReadLimitsSchema,
  readLimitsSchema,
  readWindow,
  type ReadLimits,
  type ReadWindow,
} from './read-window.ts';
export { openReadClient, ReadGate, readGateStats, type ReadGateStats } from './read-gate.ts';
export {
  baselineReadyFrom,
  firstStormWindow,
  judgeEngineWindows,
  STORM_WINDOW_MS,
  stormLookbackMs,
  stormWindows,
  trailingMedianAborts,
  type AbortWindow,
  type StormRule,
  type StormVerdict,
} from './storms.ts';
export {
  listIncidents,
  VIOLATION_ALERT_NAMES,
  VIOLATION_KINDS,
  type Culprit,
  type Incident,
  type IncidentOptions,
  type IncidentReport,
  type ViolationKind,
} from './incidents.ts';
export { computeFlags, DEFAULT_FLAG_LIMIT_PER_KIND, type FlagReport, type FlagTotal } from './flags.ts';
export { flagThresholdsSchema, loadFlagThresholds, type Flag, type FlagThresholds, type FlagWindow, type Severity } from './flag-model.ts';
export {
  clickHouseTimeMs,
  judgePinnedRows,
  pinnedRowsByEngine,
  stormReadParams,
  stormRuleOf,
  wilsonLowerBound,
  type GroupRow,
  type PinnedRow,
  type PinnedWindow,
  type TailRow,
} from './distribution.ts';
export { compareArms, type ArmReport, type ArmSummary, type ComparisonReport, type MetricComparison } from './compare.ts';
export { parseCompareRequest, parseSelectorText, SELECTOR_FILTERS, type ArmSelector, type CompareRequest } from './compare-selector.ts';
export {
  adviceWindow,
  adviseHoldTimeouts,
  parseTarget,
  peakPinnedSlots,
  type AdviceReport,
  type HoldTimeoutAdvice,
  type StormHold,
} from './advice.ts';
export {
  createOtelTraces,
  fillOtelTracesFromSpans,
  GENERIC_QUESTION_NAMES,
  GENERIC_QUESTIONS,
  runGenericQuestion,
  stormPeaks,
  type GenericQuestion,
  type StormPeak,
} from './generic/index.ts';
