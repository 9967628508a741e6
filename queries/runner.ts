import diagnosticsChannel from 'node:diagnostics_channel';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { classifyClickHouseError, InputError, isServerError, type ClickHouseClient } from '../common/index.ts';
import { parseStringListText } from './list-text.ts';

// Server codes meaning a parameter value did not parse as its declared type: the caller's error, not ours.
// (Not 130, CANNOT_READ_ARRAY_FROM_TEXT: the one list type a query may declare reaches ClickHouse parsed, so an array
// that does not parse is the query's own doing.)
const PARAMETER_ERROR_CODES = new Set(['6', '27', '38', '41', '69', '70', '72', '321', '457']);

/** The one composite parameter type a query may declare: holdscope parses its text (queries/list-text.ts). */
const STRING_LIST_TYPE = 'Array(String)';

/** What `QUERY_CHANNEL` carries when a named query has run (or failed). */
export interface QueryFinished {
  /** The query's name (its file's `-- name:`): a bounded set, fit for a metric label. */
  name: string;
  /** From sending the query to having its rows parsed (or the failure). */
  seconds: number;
  ok: boolean;
}

/**
 * The node:diagnostics_channel on which every named query run through this module is announced once it ends, so that
 * a process serving them (the read API) can time them without each caller passing a recorder along. Publishing costs
 * nothing while no one subscribes.
 */
export const QUERY_CHANNEL = 'holdscope:query';
const queryChannel = diagnosticsChannel.channel(QUERY_CHANNEL);

const SQL_DIR = join(dirname(fileURLToPath(import.meta.url)), 'sql');

export interface QueryParam {
  name: string;
  type: string;
  description: string;
  /** Present when the parameter is optional. */
  defaultValue?: string;
}

export interface QueryDefinition {
  name: string;
  purpose: string;
  params: QueryParam[];
  columns: string;
  sql: string;
}

/**
 * Names a query may not declare: `db` is the database, `max_rows` the read API's row cap and `holdscope_row_cap`
 * the LIMIT that applies it (runQueryCapped). A query declaring one would have its value taken or overwritten.
 */
const RESERVED_PARAMS = new Set(['db', 'max_rows', 'holdscope_row_cap']);

const PARAM_LINE = /^--\s*param\s+([a-z_][a-z0-9_]*)\s+([A-Za-z0-9(), ']+?)(?:\s*=\s*('(?:[^']*)'|[^:]+?))?\s*:\s*(.*)$/;

/** Reads a query file's header: `-- name:`, `-- purpose:`, `-- param NAME Type [= default]: text`, `-- columns:`. */
export function parseQueryFile(text: string, file: string): QueryDefinition {
  const def: QueryDefinition = { name: '', purpose: '', params: [], columns: '', sql: text };
  for (const line of text.split('\n')) {
    if (!line.startsWith('--')) break;
    const param = PARAM_LINE.exec(line);
    if (param) {
      const [, name, type, rawDefault, description] = param as unknown as [string, string, string, string | undefined, string];
      if (RESERVED_PARAMS.has(name)) throw new Error(`${file}: parameter ${name} is reserved (${[...RESERVED_PARAMS].join(', ')})`);
      const declared = type.trim();
      // Text for any other composite type would go to ClickHouse as one string, which a server reads TSV-escaped and
      // refuses (queries/list-text.ts): only Array(String) is parsed into a value first.
      if (/^(Array|Tuple|Map|Nested)\(/.test(declared) && declared !== STRING_LIST_TYPE) {
        throw new Error(`${file}: parameter ${name} has type ${declared}; of the composite types only ${STRING_LIST_TYPE} can be given as text`);
      }
      def.params.push({ name, type: declared, description, defaultValue: rawDefault === undefined ? undefined : rawDefault.replace(/^'(.*)'$/, '$1') });
      continue;
    }
    const field = /^--\s*(name|purpose|columns):\s*(.*)$/.exec(line);
    if (field) def[field[1] as 'name' | 'purpose' | 'columns'] = (field[2] ?? '').trim();
  }
  if (!def.name || !def.purpose) throw new Error(`${file}: a query file needs '-- name:' and '-- purpose:' header lines`);
  const used = new Set([...text.matchAll(/\{([a-z_][a-z0-9_]*):[^}]+\}/g)].map((m) => m[1]));
  used.delete('db');
  for (const name of used) if (!def.params.some((p) => p.name === name)) throw new Error(`${file}: parameter {${name}} is used but not declared in the header`);
  return def;
}

let cache: Map<string, QueryDefinition> | undefined;

/** Every query under queries/sql, by name. */
export function listQueries(): Map<string, QueryDefinition> {
  if (cache) return cache;
  cache = new Map();
  for (const file of readdirSync(SQL_DIR).filter((f) => f.endsWith('.sql')).sort()) {
    const def = parseQueryFile(readFileSync(join(SQL_DIR, file), 'utf8'), file);
    cache.set(def.name, def);
  }
  return cache;
}

export function getQuery(name: string): QueryDefinition {
  const def = listQueries().get(name);
  if (!def) throw new InputError(`unknown query ${JSON.stringify(name)}; known: ${[...listQueries().keys()].join(', ')}`);
  return def;
}

/**
 * A parameter's value: text in ClickHouse's own format (what HTTP query strings and the CLI give), or, for an
 * `Array(String)` parameter, the strings themselves (the client escapes them).
 */
export type ParamValue = string | readonly string[];

/** Checks given values against a query's declared parameters: unknown, missing and malformed values are InputErrors. */
export function bindParams(def: QueryDefinition, given: Record<string, ParamValue>): Record<string, ParamValue> {
  const bound: Record<string, ParamValue> = {};
  for (const key of Object.keys(given)) {
    if (!def.params.some((p) => p.name === key)) throw new InputError(`query ${def.name} has no parameter ${JSON.stringify(key)}; it takes ${def.params.map((p) => p.name).join(', ') || 'none'}`);
  }
  for (const p of def.params) {
    const value = given[p.name] ?? p.defaultValue;
    if (value === undefined) throw new InputError(`query ${def.name} needs parameter ${p.name} (${p.type}): ${p.description}`);
    if (p.type === STRING_LIST_TYPE) {
      const list = typeof value === 'string' ? parseStringListText(value) : value;
      if (!list) throw new InputError(`${p.name}: expected a list of strings (${p.type}) written as ['a','b'], a quote or a backslash inside an element doubled, got ${JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)}`);
      bound[p.name] = list;
      continue;
    }
    if (typeof value !== 'string') throw new InputError(`${p.name}: expected one value (${p.type}), got a list`);
    const base = p.type.replace(/^Nullable\((.*)\)$/, '$1');
    if (/^U?Int\d+$/.test(base) && !/^-?\d+$/.test(value)) throw new InputError(`${p.name}: expected an integer (${p.type}), got ${JSON.stringify(value)}`);
    if (/^Float\d+$/.test(base) && !Number.isFinite(Number(value))) throw new InputError(`${p.name}: expected a number (${p.type}), got ${JSON.stringify(value)}`);
    if (/^DateTime/.test(base)) {
      const ms = Date.parse(value);
      if (Number.isNaN(ms)) throw new InputError(`${p.name}: expected an ISO 8601 time (${p.type}), got ${JSON.stringify(value)}`);
      // ClickHouse parses parameters in its own format only: ISO 8601 becomes 'YYYY-MM-DD hh:mm:ss.sss' (UTC).
      bound[p.name] = new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
      continue;
    }
    bound[p.name] = value;
  }
  return bound;
}

/** Runs a named query with bound parameters (never string-built SQL); rows come back as JSON objects. */
export async function runQuery<T = Record<string, unknown>>(client: ClickHouseClient, database: string, name: string, params: Record<string, ParamValue> = {}): Promise<T[]> {
  const def = getQuery(name);
  return execute<T>(client, name, def.sql, { ...bindParams(def, params), db: database });
}

/**
 * A named query's first `maxRows` rows in its own order, and whether it had more. The cap is applied by ClickHouse
 * (the query wrapped in a LIMIT bound as a parameter), so neither side holds a result larger than it: a day of late
 * writes with every writer is 150 MB of JSON.
 */
export async function runQueryCapped<T = Record<string, unknown>>(
  client: ClickHouseClient,
  database: string,
  name: string,
  params: Record<string, string>,
  maxRows: number,
): Promise<{ rows: T[]; truncated: boolean }> {
  const def = getQuery(name);
  // The newline ends a comment on the file's last line. No query declares this parameter, so none can be given it.
  const sql = `SELECT * FROM (\n${def.sql}\n) LIMIT {holdscope_row_cap:UInt64}`;
  const rows = await execute<T>(client, name, sql, { ...bindParams(def, params), db: database, holdscope_row_cap: String(maxRows + 1) });
  return { rows: rows.slice(0, maxRows), truncated: rows.length > maxRows };
}

async function execute<T>(client: ClickHouseClient, name: string, sql: string, params: Record<string, ParamValue>): Promise<T[]> {
  const started = performance.now();
  let ok = false;
  try {
    const result = await client.query({
      query: sql,
      format: 'JSONEachRow',
      query_params: params,
      clickhouse_settings: { date_time_output_format: 'iso', output_format_json_quote_64bit_integers: 0 },
    });
    const rows = (await result.json()) as T[];
    ok = true;
    return rows;
  } catch (error) {
    if (isServerError(error) && PARAMETER_ERROR_CODES.has(error.code)) {
      throw new InputError(`query ${name}: a parameter does not fit its type (ClickHouse error ${error.code})`, { cause: error });
    }
    throw classifyClickHouseError(error, `query ${name}`);
  } finally {
    if (queryChannel.hasSubscribers) queryChannel.publish({ name, seconds: (performance.now() - started) / 1000, ok } satisfies QueryFinished);
  }
}
