/**
 * Where ClickHouse's CPU went while a stage's load ran, by kind of work: the statements from `system.query_log` (the
 * pipeline's span INSERTs and record refreshes, the hold minutes, each named read: the push's lookups, the prober's)
 * and the background merges of each table from `system.part_log`. Opt-in (`npm run bench -- --clickhouse-cpu`): the
 * server keeps both logs only then (test/support/clickhouse-logs.ts), which costs it about 0.02 of a core (their own
 * flushes and merges), so such a run's other figures are not a plain run's.
 */
import type { ClickHouseClient } from '@clickhouse/client';

export interface CpuShare {
  /** `span INSERTs`, `record refreshes`, `hold minutes`, `read <name>`, `merges <table>`, `other statements`. */
  work: string;
  /** Cores it took on average over the interval (user + system time of its threads). */
  cores: number;
  /** Statements or merges counted. */
  count: number;
  /** For statements: their mean time and rows read, as `system.query_log` has them (`query_duration_ms`, `read_rows`). */
  meanMs?: number;
  meanRowsRead?: number;
}

// Kinds told apart by the pipeline's statements' own text, and the named reads by their log_comment (queries/runner.ts).
const STATEMENT_KIND = `multiIf(
    match(query, 'INSERT INTO \\\\S+\\\\.spans\\\\b'), 'span INSERTs',
    match(query, 'INSERT INTO \\\\S+\\\\.lifecycle_records\\\\b'), 'record refreshes',
    position(query, 'hold_minutes') > 0 OR position(query, 'ARRAY JOIN holds') > 0, 'hold minutes',
    startsWith(log_comment, 'holdscope '), concat('read ', substring(log_comment, 11)),
    'other statements')`;
const CPU_US = `ProfileEvents['UserTimeMicroseconds'] + ProfileEvents['SystemTimeMicroseconds']`;
const WINDOW = `event_time_microseconds BETWEEN fromUnixTimestamp64Milli({from:Int64}) AND fromUnixTimestamp64Milli({to:Int64})`;

/**
 * Where ClickHouse's CPU went between `fromMs` and `toMs` (wall clock), largest first: `statements` by statement kind
 * and merged table, and `views` by materialized view, each part of the share of the statement that fed it (span
 * INSERTs, record refreshes), which counts its views' work too. The logs are flushed once, for both.
 */
export async function clickhouseCpuShares(
  client: ClickHouseClient,
  fromMs: number,
  toMs: number,
): Promise<{ statements: CpuShare[]; views: CpuShare[] }> {
  await client.command({ query: 'SYSTEM FLUSH LOGS' });
  const read = (query: string) => shares(client, fromMs, toMs, query);
  const [statements, views] = await Promise.all([
    read(`
      SELECT ${STATEMENT_KIND} AS work, sum(${CPU_US}) / 1e6 / {seconds:Float64} AS cores, count() AS count,
        avg(query_duration_ms) AS mean_ms, avg(read_rows) AS mean_rows_read
      FROM system.query_log WHERE type = 'QueryFinish' AND ${WINDOW} AND query_kind != 'System'
      GROUP BY work
      UNION ALL
      SELECT concat('merges ', table) AS work, sum(${CPU_US}) / 1e6 / {seconds:Float64} AS cores, count() AS count,
        NULL AS mean_ms, NULL AS mean_rows_read
      FROM system.part_log WHERE event_type = 'MergeParts' AND ${WINDOW}
      GROUP BY work`),
    read(`
      SELECT splitByChar('.', view_name)[-1] AS work, sum(${CPU_US}) / 1e6 / {seconds:Float64} AS cores, count() AS count
      FROM system.query_views_log WHERE ${WINDOW}
      GROUP BY work`),
  ]);
  return { statements, views };
}

async function shares(client: ClickHouseClient, fromMs: number, toMs: number, query: string): Promise<CpuShare[]> {
  const seconds = (toMs - fromMs) / 1000;
  const result = await client.query({
    query,
    query_params: { from: Math.round(fromMs), to: Math.round(toMs), seconds },
    format: 'JSONEachRow',
  });
  type Row = { work: string; cores: number; count: string; mean_ms?: number | null; mean_rows_read?: number | null };
  return (await result.json<Row>())
    .map((r) => ({
      work: r.work,
      cores: Number(r.cores),
      count: Number(r.count),
      ...(r.mean_ms == null ? {} : { meanMs: Number(r.mean_ms), meanRowsRead: Number(r.mean_rows_read) }),
    }))
    .sort((a, b) => b.cores - a.cores);
}

/** One share in words: its name, its cores and its count, and for statements their mean time and rows read. */
export function describeShare(s: CpuShare): string {
  const each = s.meanMs === undefined ? '' : `, ${Math.round(s.meanMs)} ms and ${Math.round(s.meanRowsRead ?? 0)} rows read each`;
  return `${s.work} ${s.cores.toFixed(2)} (${s.count}${each})`;
}

/** The shares as a note: the largest by name, the rest summed, and what no statement or merge accounts for. */
export function describeCpuShares(shares: readonly CpuShare[], processCores: number, shown = 8): string {
  const named = shares.slice(0, shown).map(describeShare);
  const rest = shares.slice(shown).reduce((n, s) => n + s.cores, 0);
  const unaccounted = processCores - shares.reduce((n, s) => n + s.cores, 0);
  return [...named, `the rest ${rest.toFixed(2)}`, `no statement or merge ${unaccounted.toFixed(2)}`].join(', ');
}
