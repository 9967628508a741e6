import diagnosticsChannel from 'node:diagnostics_channel';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { classifyClickHouseError, clickHouseFailureKind, InputError, isServerError, type ClickHouseClient } from '../common/index.ts';
import { parseStringListText } from './list-text.ts';
import { leavesRowsWhenStopped, readGateOf } from './read-gate.ts';
import { checkReadWindow, DEFAULT_READ_LIMITS, describeDuration, parseWindowTime, type ReadLimits } from './read-window.ts';

// Server codes meaning a parameter value did not parse as its declared type: the caller's error, not ours.
// (Not 130, CANNOT_READ_ARRAY_FROM_TEXT: the one list type a query may declare reaches ClickHouse parsed, so an array
// that does not parse is the query's own doing.)
const PARAMETER_ERROR_CODES = new Set(['6', '27', '38', '41', '69', '70', '72', '321', '457']);

// Server codes meaning a read stopped at the time limit it runs under (max_execution_time): 159 when it ran past it,
// 160 when ClickHouse estimated early that it would.
const TIME_LIMIT_CODES = new Set(['159', '160']);
// MEMORY_LIMIT_EXCEEDED is also what a server short of memory overall answers, which is transient; only the query's
// own limit (max_memory_usage) is the read's doing. ClickHouse says which in the message alone.
const MEMORY_LIMIT_CODE = '241';
const QUERY_MEMORY_LIMIT = /query memory limit|memory limit \(for query\)/i;

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
        throw new Error(
          `${file}: parameter ${name} has type ${declared}; of the composite types only ${STRING_LIST_TYPE} can be given as text`,
        );
      }
      def.params.push({
        name,
        type: declared,
        description,
        defaultValue: rawDefault === undefined ? undefined : rawDefault.replace(/^'(.*)'$/, '$1'),
      });
      continue;
    }
    const field = /^--\s*(name|purpose|columns):\s*(.*)$/.exec(line);
    if (field) def[field[1] as 'name' | 'purpose' | 'columns'] = (field[2] ?? '').trim();
  }
  if (!def.name || !def.purpose) throw new Error(`${file}: a query file needs '-- name:' and '-- purpose:' header lines`);
  // The name goes into URLs, metric labels and each read's log_comment (querySettings) as it is.
  if (!/^\w+$/.test(def.name))
    throw new Error(`${file}: a query's name is letters, digits and underscores, not ${JSON.stringify(def.name)}`);
  const used = new Set([...text.matchAll(/\{([a-z_][a-z0-9_]*):[^}]+\}/g)].map((m) => m[1]));
  used.delete('db');
  for (const name of used)
    if (!def.params.some((p) => p.name === name)) throw new Error(`${file}: parameter {${name}} is used but not declared in the header`);
  return def;
}

let cache: Map<string, QueryDefinition> | undefined;

/** Every query under queries/sql, by name. */
export function listQueries(): Map<string, QueryDefinition> {
  if (cache) return cache;
  cache = new Map();
  for (const file of readdirSync(SQL_DIR)
    .filter((f) => f.endsWith('.sql'))
    .sort()) {
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

/** How a named query is read: under which limits, and until when it may wait for its turn. */
export interface ReadOptions {
  /** The read limits (queries/read-window.ts); DEFAULT_READ_LIMITS when absent. */
  limits?: ReadLimits;
  /** Gives up waiting for a turn when aborted (a sibling read of the same request failed: its answer is lost anyway). */
  signal?: AbortSignal;
}

/** Lookback parameters that widen a query's range before `from` by so many hours (open holds started before it). */
const LOOKBACK_HOURS_PARAMS = ['open_lookback_hours'];

/**
 * Checks given values against a query's declared parameters: unknown, missing and malformed values are InputErrors,
 * and so is a range (`from`, `to`) wider than `maxWindowMs`, or a lookback longer than it.
 */
export function bindParams(
  def: QueryDefinition,
  given: Record<string, ParamValue>,
  maxWindowMs = DEFAULT_READ_LIMITS.maxReadWindowMs,
  nowMs = Date.now(),
): Record<string, ParamValue> {
  const bound: Record<string, ParamValue> = {};
  const times = new Map<string, number>();
  for (const key of Object.keys(given)) {
    if (!def.params.some((p) => p.name === key))
      throw new InputError(
        `query ${def.name} has no parameter ${JSON.stringify(key)}; it takes ${def.params.map((p) => p.name).join(', ') || 'none'}`,
      );
  }
  for (const p of def.params) {
    const value = given[p.name] ?? p.defaultValue;
    if (value === undefined) throw new InputError(`query ${def.name} needs parameter ${p.name} (${p.type}): ${p.description}`);
    if (p.type === STRING_LIST_TYPE) {
      const list = typeof value === 'string' ? parseStringListText(value) : value;
      if (!list)
        throw new InputError(
          `${p.name}: expected a list of strings (${p.type}) written as ['a','b'], a quote or a backslash inside an element doubled, got ${JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)}`,
        );
      bound[p.name] = list;
      continue;
    }
    if (typeof value !== 'string') throw new InputError(`${p.name}: expected one value (${p.type}), got a list`);
    const base = p.type.replace(/^Nullable\((.*)\)$/, '$1');
    if (/^U?Int\d+$/.test(base) && !/^-?\d+$/.test(value))
      throw new InputError(`${p.name}: expected an integer (${p.type}), got ${JSON.stringify(value)}`);
    if (/^Float\d+$/.test(base) && !Number.isFinite(Number(value)))
      throw new InputError(`${p.name}: expected a number (${p.type}), got ${JSON.stringify(value)}`);
    if (/^DateTime/.test(base)) {
      // As every windowed read: ISO 8601, `now` or relative to it (`-2h`), so a link or a script reads alike everywhere.
      const ms = parseWindowTime(value, p.name, nowMs);
      times.set(p.name, ms);
      // ClickHouse parses parameters in its own format only: ISO 8601 becomes 'YYYY-MM-DD hh:mm:ss.sss' (UTC).
      bound[p.name] = new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
      continue;
    }
    bound[p.name] = value;
  }
  const from = times.get('from');
  const to = times.get('to');
  if (from !== undefined && to !== undefined) checkReadWindow(from, to, maxWindowMs);
  for (const name of LOOKBACK_HOURS_PARAMS) {
    const hours = Number(bound[name]);
    if (Number.isFinite(hours) && hours * 3_600_000 > maxWindowMs)
      throw new InputError(
        `${name}: ${hours} hours reaches further back than a read may cover (${describeDuration(maxWindowMs)}, the max read window)`,
      );
  }
  return bound;
}

/** Runs a named query with bound parameters (never string-built SQL); rows come back as JSON objects. */
export async function runQuery<T = Record<string, unknown>>(
  client: ClickHouseClient,
  database: string,
  name: string,
  params: Record<string, ParamValue> = {},
  read: ReadOptions = {},
): Promise<T[]> {
  const def = getQuery(name);
  const limits = read.limits ?? DEFAULT_READ_LIMITS;
  return execute<T>(client, name, def.sql, { ...bindParams(def, params, limits.maxReadWindowMs), db: database }, limits, read.signal);
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
  read: ReadOptions = {},
): Promise<{ rows: T[]; truncated: boolean }> {
  const def = getQuery(name);
  const limits = read.limits ?? DEFAULT_READ_LIMITS;
  // The newline ends a comment on the file's last line. No query declares this parameter, so none can be given it.
  const sql = `SELECT * FROM (\n${def.sql}\n) LIMIT {holdscope_row_cap:UInt64}`;
  const rows = await execute<T>(
    client,
    name,
    sql,
    { ...bindParams(def, params, limits.maxReadWindowMs), db: database, holdscope_row_cap: String(maxRows + 1) },
    limits,
    read.signal,
  );
  return { rows: rows.slice(0, maxRows), truncated: rows.length > maxRows };
}

/**
 * The limits as the query's own SETTINGS clause, not as client settings: chdb applies client settings with SET, which
 * stays on its connection for every later query (measured with chdb 3.4), writes included. The values are validated
 * integers. timeout_overflow_mode is named because a server profile set to 'break' would return a partial result as
 * if it were whole. log_comment names the query in the server's system.query_log (`holdscope <name>`), so that a
 * ClickHouse operator can tell which of holdscope's reads costs what (a name is checked to be \w+ when its file is read).
 */
const querySettings = (limits: ReadLimits, name: string) =>
  `SETTINGS max_execution_time = ${Math.trunc(limits.maxReadSeconds)}, max_memory_usage = ${Math.trunc(limits.maxReadMemoryBytes)}, ` +
  `timeout_overflow_mode = 'throw', log_comment = 'holdscope ${name}'`;

/** A read stopped by its own limits is answered 400 naming the limit: the same read would stop again, a narrower one not. */
function limitError(error: unknown, name: string, limits: ReadLimits): InputError | undefined {
  if (!isServerError(error)) return undefined;
  if (TIME_LIMIT_CODES.has(error.code)) {
    return new InputError(
      `query ${name} stopped at the read time limit (max_execution_time ${limits.maxReadSeconds} s, maxReadSeconds): narrow the range`,
      { cause: error },
    );
  }
  if (error.code === MEMORY_LIMIT_CODE && QUERY_MEMORY_LIMIT.test(error.message)) {
    return new InputError(
      `query ${name} stopped at the read memory limit (max_memory_usage ${limits.maxReadMemoryBytes} bytes, maxReadMemoryBytes): narrow the range`,
      { cause: error },
    );
  }
  return undefined;
}

async function execute<T>(
  client: ClickHouseClient,
  name: string,
  sql: string,
  params: Record<string, ParamValue>,
  limits: ReadLimits,
  signal: AbortSignal | undefined,
): Promise<T[]> {
  const release = await readGateOf(client, limits).acquire(signal);
  const started = performance.now();
  let ok = false;
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await client.query({
          // The newline ends a comment on the query's last line; no query file has a SETTINGS clause of its own.
          query: `${sql}\n${querySettings(limits, name)}`,
          format: 'JSONEachRow',
          query_params: params,
          clickhouse_settings: { date_time_output_format: 'iso', output_format_json_quote_64bit_integers: 0 },
        });
        const rows = (await result.json()) as T[];
        ok = true;
        return rows;
      } catch (error) {
        // Still holding the turn, so no other read of this connection runs before the rows are cleared.
        if (isServerError(error) && leavesRowsWhenStopped(client)) await clearStoppedRows(client);
        if (isServerError(error) && PARAMETER_ERROR_CODES.has(error.code)) {
          throw new InputError(`query ${name}: a parameter does not fit its type (ClickHouse error ${error.code})`, { cause: error });
        }
        const limited = limitError(error, name, limits);
        if (limited) throw limited;
        // Asked once more: a refusal of the query itself repeats, while a code ClickHouse also gives for a connection
        // cut under the read does not (32, ATTEMPT_TO_READ_AFTER_EOF, when a Distributed table's replica dies), and
        // the second try reads from a live replica.
        if (attempt === 1 && clickHouseFailureKind(error) === 'content') continue;
        throw classifyClickHouseError(error, `query ${name}`);
      }
    }
  } finally {
    release();
    if (queryChannel.hasSubscribers)
      queryChannel.publish({ name, seconds: (performance.now() - started) / 1000, ok } satisfies QueryFinished);
  }
}

/** Takes what a stopped query left on an embedded connection (see read-gate.ts), so the next read answers only its own rows. */
async function clearStoppedRows(client: ClickHouseClient): Promise<void> {
  try {
    await (await client.query({ query: 'SELECT 1', format: 'TabSeparated' })).text();
  } catch {
    // The connection is gone or failing: the next read fails too, and says so.
  }
}
