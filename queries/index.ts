export { listQueries, getQuery, bindParams, runQuery, parseQueryFile, type QueryDefinition, type QueryParam } from './runner.ts';
export { computeFlags, flagThresholdsSchema, type Flag, type FlagThresholds, type FlagWindow, type Severity } from './flags.ts';
