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
export { firstStormWindow, STORM_WINDOW_MS, stormWindows, trailingMedianAborts, type AbortWindow, type StormRule } from './storms.ts';
export { computeFlags, DEFAULT_FLAG_LIMIT_PER_KIND, type FlagReport, type FlagTotal } from './flags.ts';
export { flagThresholdsSchema, loadFlagThresholds, type Flag, type FlagThresholds, type FlagWindow, type Severity } from './flag-model.ts';
export { type GroupRow, type PinnedRow, type TailRow } from './distribution.ts';
