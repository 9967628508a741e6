export { listQueries, getQuery, bindParams, runQuery, parseQueryFile, type QueryDefinition, type QueryParam } from './runner.ts';
