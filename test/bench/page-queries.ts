import type { ClickHouseClient } from '../../common/index.ts';
import { migrate, rebuildLifecycleRecords } from '../../pipeline/index.ts';
import { DEFAULT_FLAG_LIMIT_PER_KIND } from '../../queries/index.ts';
import { percentile } from './freshness.ts';

async function scalar(client: ClickHouseClient, query: string, params: Record<string, unknown> = {}): Promise<number> {
  const rows = await (await client.query({ query, format: 'JSONEachRow', query_params: params })).json<{ n: number | string }>();
  return Number(rows[0]?.n ?? NaN);
}

/**
 * A large query dataset built inside ClickHouse from a simulated template (the backlog the pipeline stored):
 * copies of its spans under new request ids, laid end to end so that they form one stretch of traffic at the
 * template's rate ending at `endMs`, and keep the simulator's mix (drains, timeouts, tails, late writes, storms).
 * The copies go through the `spans` table and its materialized view, as ingested spans do.
 */
export async function buildQueryDataset(options: {
  client: ClickHouseClient;
  templateDb: string;
  database: string;
  lifecycles: number;
  endMs: number;
  /** Lay the copies this far apart (ms) rather than end to end, e.g. spread over a week of mostly quiet hours. */
  strideMs?: number;
  /**
   * A cluster created node by node (`client` one of its nodes, `nodes` a client of every node): the schema goes to
   * every node, the copies and the records through the Distributed tables over `client`, as the pipeline writes them,
   * and each node merges its own `_local` record tables.
   */
  cluster?: { name: string; nodes: readonly ClickHouseClient[] };
  onProgress?: (lifecycles: number) => void;
}): Promise<{ lifecycles: number; spans: number; hours: number; seconds: number }> {
  const { client, templateDb, database, cluster } = options;
  const started = performance.now();
  const layout = cluster ? { cluster: cluster.name, ddl: 'node-by-node' as const, nodes: cluster.nodes } : {};
  await migrate(client, { database, retentionDays: 30, ...layout });
  const templateLifecycles = await scalar(
    client,
    `SELECT count() AS n FROM (SELECT DISTINCT cluster, request_id, generation FROM ${templateDb}.lifecycle_states)`,
  );
  const templateStart = await scalar(client, `SELECT toUnixTimestamp64Milli(min(start_time)) AS n FROM ${templateDb}.spans`);
  const templateEnd = await scalar(client, `SELECT toUnixTimestamp64Milli(max(end_time)) AS n FROM ${templateDb}.spans`);
  const copies = Math.max(1, Math.ceil(options.lifecycles / templateLifecycles));
  const slotMs = Math.max(templateEnd - templateStart + 1, options.strideMs ?? 0);
  const perInsert = Math.max(1, Math.floor(2_000_000 / templateLifecycles));
  for (let first = 0; first < copies; first += perInsert) {
    const count = Math.min(perInsert, copies - first);
    await client.command({
      query: `
        INSERT INTO ${database}.spans
        SELECT s.* REPLACE (
            concat(s.request_id, '~', toString(n.number)) AS request_id,
            addMilliseconds(s.start_time, {base:Int64} - toInt64(n.number) * {slot:Int64}) AS start_time,
            addMilliseconds(s.end_time, {base:Int64} - toInt64(n.number) * {slot:Int64}) AS end_time)
        FROM ${templateDb}.spans AS s, numbers({first:UInt64}, {count:UInt64}) AS n`,
      query_params: { base: options.endMs - slotMs - templateStart, slot: slotMs, first, count },
      clickhouse_settings: { max_insert_threads: '2', max_partitions_per_insert_block: '1000' },
    });
    options.onProgress?.((first + count) * templateLifecycles);
  }
  // SQL copies bypass the pipeline, which computes stored records after each INSERT: compute them here at once.
  await rebuildLifecycleRecords(client, database, { parts: Math.max(1, Math.ceil(options.lifecycles / 500_000)) });
  // The pipeline writes records in time order, so a live table's merged parts each hold a stretch of time and
  // the window queries' FINAL merges little. A rebuild in request-id slices leaves every part spanning every bucket,
  // which FINAL must merge across on each read (3-8x slower at 10M lifecycles): merge the record tables, as a
  // live table's background merges have by then.
  for (const table of ['lifecycle_records', 'lifecycle_flags', 'lifecycle_holds', 'page_allocations']) {
    for (const node of cluster?.nodes ?? [client]) {
      const query = `OPTIMIZE TABLE ${database}.${table}${cluster ? '_local' : ''} FINAL`;
      await node.command({ query, clickhouse_settings: { optimize_throw_if_noop: 0 } });
    }
  }
  const lifecycles = await scalar(
    client,
    `SELECT count() AS n FROM (SELECT DISTINCT cluster, request_id, generation FROM ${database}.lifecycle_states)`,
  );
  const spans = await scalar(client, `SELECT count() AS n FROM ${database}.spans`);
  return { lifecycles, spans, hours: (copies * slotMs) / 3_600_000, seconds: (performance.now() - started) / 1000 };
}

export interface MergesSettled {
  /** How long the wait took. */
  seconds: number;
  /** Merges running when the wait began, and the tables they were merging. */
  mergesAtStart: number;
  tablesAtStart: string[];
  /** False when merges were still running when the wait gave up. */
  settled: boolean;
}

/**
 * Waits until the ClickHouse server runs no background merge or mutation, polled every `pollMs`, for at most
 * `timeoutMs`. Loading the dataset inserts eleven hours of traffic in minutes, which leaves a backlog of merges no live
 * table carries (a live one merges as it goes, at its ingest rate) on the same cores as the timed queries: the pages
 * are timed once it has cleared, as a server that has run for hours before an incident has cleared it.
 * Quiet on three polls in a row: one merge ending often schedules the next.
 */
export async function settleMerges(
  client: ClickHouseClient,
  options: { timeoutMs: number; pollMs?: number; onProgress?: (merges: number) => void },
): Promise<MergesSettled> {
  const started = performance.now();
  const pollMs = options.pollMs ?? 1000;
  const busy = async () => {
    const rows = await (
      await client.query({
        query: `SELECT (SELECT count() FROM system.merges) + (SELECT count() FROM system.mutations WHERE NOT is_done) AS n,
                       (SELECT groupUniqArray(concat(database, '.', table)) FROM system.merges) AS tables`,
        format: 'JSONEachRow',
      })
    ).json<{ n: number | string; tables: string[] }>();
    return { n: Number(rows[0]?.n ?? 0), tables: rows[0]?.tables ?? [] };
  };
  const first = await busy();
  let quiet = first.n === 0 ? 1 : 0;
  while (quiet < 3 && performance.now() - started < options.timeoutMs) {
    await new Promise((r) => setTimeout(r, pollMs));
    const now = await busy();
    options.onProgress?.(now.n);
    quiet = now.n === 0 ? quiet + 1 : 0;
  }
  return { seconds: (performance.now() - started) / 1000, mergesAtStart: first.n, tablesAtStart: first.tables.sort(), settled: quiet >= 3 };
}

export interface EndpointLatency {
  /** The path, and what its parameters ask when one path is timed twice. */
  path: string;
  /** `compare`: the on-call page's Compare view, read when its form is sent rather than when the page opens. */
  page: 'on-call' | 'compare' | 'request';
  p50Ms: number;
  p95Ms: number;
  runs: number;
  /** The endpoint's untimed requests, in order (left out of the percentiles). */
  untimedMs: number[];
}

/**
 * Requests of each endpoint that its percentiles leave out, as a server that has run for hours before an incident
 * has long been past them:
 * - a ClickHouse process's first queries over parts it has just written are slower (at 760 k lifecycles an hour the
 *   first three /api/flags took 280-300 ms, the next 200-230);
 * - ClickHouse compiles an expression on its fourth use (compile_expressions, min_count_to_compile_expression = 3),
 *   in the query that uses it, once per server process whatever the parameters: the fourth /api/flags over 10 M
 *   lifecycles took 310-370 ms against 150-190 for the others, also when every request asked for another window,
 *   and none when compiling was off (docs/benchmarks.md).
 */
export const PAGE_WARM_UPS = 4;

/**
 * Every request the on-call page makes for its default window (the last hour), its Compare view's two kinds of
 * comparison, and the request page's, each timed `runs` times through the read API's HTTP server, one at a time, after
 * `warmUps` untimed requests, which are reported on their own.
 */
export async function timePageRequests(options: {
  apiUrl: string;
  from: string;
  to: string;
  requestId: string;
  runs: number;
  warmUps: number;
  onProgress?: (done: number) => void;
}): Promise<EndpointLatency[]> {
  const window = `from=${encodeURIComponent(options.from)}&to=${encodeURIComponent(options.to)}`;
  const id = encodeURIComponent(options.requestId);
  const windowMinutes = Math.round((Date.parse(options.to) - Date.parse(options.from)) / 60_000);
  const endpoints: { path: string; page: EndpointLatency['page']; label?: string }[] = [
    { path: `/api/flags?${window}`, page: 'on-call' },
    // The five queries /api/flags runs at once, each alone, with the parameters it gives them: which of them its
    // time follows.
    { path: `/api/queries/flags_lifecycle?${window}&limit_per_kind=${DEFAULT_FLAG_LIMIT_PER_KIND}`, page: 'on-call' },
    { path: `/api/queries/late_write_victims?${window}&writers_per_cluster=${DEFAULT_FLAG_LIMIT_PER_KIND}`, page: 'on-call' },
    { path: `/api/queries/transfer_tails?${window}`, page: 'on-call' },
    { path: `/api/queries/kv_pinned?${window}`, page: 'on-call' },
    { path: `/api/queries/hold_resolution_groups?${window}`, page: 'on-call' },
    { path: `/charts/resolution.json?${window}`, page: 'on-call' },
    { path: `/charts/tails.json?${window}`, page: 'on-call' },
    { path: `/charts/kv_pinned.json?${window}`, page: 'on-call' },
    // The advice section loads with the page, over its window.
    { path: `/api/advice?${window}`, page: 'on-call' },
    // The two questions of a rollout: the window before it against the window after it (rolled out at `from`: two
    // windows read), and version A against version B over the window (two of the mixed scenario's four decode engines).
    {
      path: `/api/compare?rollout_at=${encodeURIComponent(options.from)}&window=${windowMinutes}m`,
      page: 'compare',
      label: 'hour before last vs last hour',
    },
    {
      path: `/api/compare?both.from=${encodeURIComponent(options.from)}&both.to=${encodeURIComponent(options.to)}&baseline.decode_engine=decode-0&candidate.decode_engine=decode-1`,
      page: 'compare',
      label: 'decode-0 vs decode-1, last hour',
    },
    { path: `/api/lifecycles/${id}`, page: 'request' },
    { path: `/api/queries/late_write_victims?${window}&request_id=${id}`, page: 'request' },
    { path: `/charts/timeline.json?request_id=${id}`, page: 'request' },
  ];
  const out: EndpointLatency[] = [];
  let done = 0;
  for (const endpoint of endpoints) {
    const times: number[] = [];
    for (let run = 0; run < options.warmUps + options.runs; run++) {
      const started = performance.now();
      const res = await fetch(`${options.apiUrl}${endpoint.path}`);
      const body = await res.text();
      if (!res.ok) throw new Error(`${endpoint.path}: ${res.status} ${body.slice(0, 300)}`);
      times.push(performance.now() - started);
      options.onProgress?.(++done);
    }
    const timed = times.slice(options.warmUps);
    out.push({
      path: (endpoint.path.split('?')[0] as string) + (endpoint.label ? ` (${endpoint.label})` : ''),
      page: endpoint.page,
      p50Ms: percentile(timed, 50),
      p95Ms: percentile(timed, 95),
      runs: timed.length,
      untimedMs: times.slice(0, options.warmUps),
    });
  }
  return out;
}
