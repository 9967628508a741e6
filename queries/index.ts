export { formatStringListText, parseStringListText } from './list-text.ts';
export { listQueries, getQuery, bindParams, runQuery, runQueryCapped, parseQueryFile, QUERY_CHANNEL, type QueryDefinition, type QueryFinished, type QueryParam, type ParamValue } from './runner.ts';
export { computeFlags, DEFAULT_FLAG_LIMIT_PER_KIND, flagThresholdsSchema, type FlagReport, type FlagTotal, loadFlagThresholds, type Flag, type FlagThresholds, type FlagWindow, type Severity } from './flags.ts';
export { wilsonLowerBound, type GroupRow, type PinnedRow, type TailRow } from './distribution.ts';
