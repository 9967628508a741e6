// The generic stack, side by side (docs/queries.md): the query dataset's spans stored again as the OpenTelemetry
// Collector's ClickHouse exporter stores them, and the four on-call questions timed on both stores over the same
// window, each asked the way its store allows (queries/generic/*.sql against holdscope's queries/sql).
import type { ClickHouseClient } from '../../common/index.ts';
import {
  createOtelTraces,
  fillOtelTracesFromSpans,
  GENERIC_QUESTION_NAMES,
  GENERIC_QUESTIONS,
  loadFlagThresholds,
  runGenericQuestion,
  runQuery,
  stormPeaks,
  stormReadParams,
  type GenericQuestion,
  type PinnedRow,
} from '../../queries/index.ts';
import { percentile } from './freshness.ts';
import { settleMerges } from './page-queries.ts';
import type { Figure } from './report.ts';

export interface GenericStackResult {
  /** For the bench's table, in order: the fill, the sizes, then per question generic, holdscope and their ratio. */
  figures: Figure[];
  /** For the bench's JSON line: the same figures under snake_case names. */
  json: Record<string, number>;
}

/** The bytes on disk of the active parts of each table of `database`. */
async function tableBytes(client: ClickHouseClient, database: string): Promise<Map<string, number>> {
  const res = await client.query({
    query: `SELECT table, sum(bytes_on_disk) AS bytes FROM system.parts WHERE database = {db:String} AND active GROUP BY table`,
    query_params: { db: database },
    format: 'JSONEachRow',
  });
  return new Map(((await res.json()) as { table: string; bytes: number | string }[]).map((r) => [r.table, Number(r.bytes)]));
}

/** Both stores' answer to one question: holdscope's named query, or the SQL over otel_traces (storms judged alike). */
function asker(client: ClickHouseClient, database: string, question: GenericQuestion, window: { from: string; to: string }) {
  const thresholds = loadFlagThresholds({});
  const extra: Record<string, string> = question === 'kv_pinned_storms' ? stormReadParams(thresholds) : {};
  const fromMs = Date.parse(window.from);
  const judge = (rows: unknown[]) => (question === 'kv_pinned_storms' ? stormPeaks(rows as PinnedRow[], fromMs, thresholds) : rows);
  const { holdscopeQuery, holdscopeParams } = GENERIC_QUESTIONS[question];
  return {
    // hold_resolution_groups answers for every scope at once; the question is its decode engine rows.
    holdscope: async () =>
      judge(await runQuery(client, database, holdscopeQuery, { ...window, ...holdscopeParams, ...extra })).filter(
        (row) => question !== 'resolution_by_decode_engine' || (row as { scope_kind: string }).scope_kind === 'decode_engine',
      ).length,
    generic: async () => judge(await runGenericQuestion(client, database, question, { ...window, ...extra })).length,
  };
}

async function timed(run: () => Promise<number>): Promise<{ ms: number; rows: number }> {
  const started = performance.now();
  const rows = await run();
  return { ms: performance.now() - started, rows };
}

/** Fills otel_traces from `database`.spans, waits for its merges, and reports the fill and both stores' sizes. */
/**
 * Fills otel_traces with the spans of the two hours before the window and the window itself: what the questions read
 * (an open hold from an hour before, a lifecycle 10 min either side, the storm baseline minutes). Copying all eleven
 * hours of the 10 M dataset would take about 40 min on 2 cores (13 s for 0.7 M spans); a generic table holding less
 * than holdscope's only favours the generic side.
 */
async function fill(client: ClickHouseClient, database: string, fromIso: string, mergeTimeoutMs: number): Promise<GenericStackResult> {
  const started = performance.now();
  await createOtelTraces(client, database);
  const sinceIso = new Date(Date.parse(fromIso) - 2 * 3_600_000).toISOString();
  const { rows } = await fillOtelTracesFromSpans(client, database, { sinceIso });
  const fillS = (performance.now() - started) / 1000;
  const merges = await settleMerges(client, { timeoutMs: mergeTimeoutMs });
  const bytes = await tableBytes(client, database);
  const generic = bytes.get('otel_traces') ?? 0;
  const holdscope = [...bytes].filter(([t]) => t !== 'otel_traces' && t !== 'schema_migrations').reduce((sum, [, b]) => sum + b, 0);
  const spans = bytes.get('spans') ?? 0;
  const spanRows = Number(
    (
      (await (await client.query({ query: `SELECT count() AS n FROM ${database}.spans`, format: 'JSONEachRow' })).json()) as { n: string }[]
    )[0]?.n ?? 0,
  );
  // Per span: otel_traces holds the last hours only, holdscope's tables every span of the dataset.
  const perSpan = (b: number, n: number) => Math.round(b / Math.max(1, n));
  const mib = (b: number) => Math.round(b / 2 ** 20);
  return {
    figures: [
      {
        name: 'generic otel_traces fill',
        value: Math.round(fillS),
        unit: 's',
        note: `${rows} rows (the spans from 2 h before the window on); merges settled in ${Math.round(merges.seconds)} s after`,
      },
      {
        name: 'generic otel_traces on disk',
        value: perSpan(generic, rows),
        unit: 'B/span',
        note:
          `${mib(generic)} MiB for ${rows} spans; holdscope ${perSpan(holdscope, spanRows)} B/span in all its tables ` +
          `(${mib(holdscope)} MiB for ${spanRows} spans; spans alone ${perSpan(spans, spanRows)} B/span)`,
      },
    ],
    json: {
      generic_fill_s: Math.round(fillS),
      generic_rows: rows,
      generic_disk_bytes_per_span: perSpan(generic, rows),
      holdscope_disk_bytes_per_span: perSpan(holdscope, spanRows),
    },
  };
}

/**
 * Fills otel_traces from the query dataset in `database` and times each question `runs` times on each store over
 * `from`..`to` (the pages' window), after `warmUps` untimed runs, the two stores taking turns so that both see the
 * same noise. The notes say how many rows each answered (the tests check the answers are the same; at the window's
 * edges the generic questions see lifecycles by their spans rather than by their records, see queries/generic).
 */
export async function timeGenericStack(options: {
  client: ClickHouseClient;
  database: string;
  from: string;
  to: string;
  runs: number;
  warmUps: number;
  mergeTimeoutMs: number;
  onProgress?: (done: number) => void;
}): Promise<GenericStackResult> {
  const { client, database } = options;
  const out = await fill(client, database, options.from, options.mergeTimeoutMs);
  let done = 0;
  for (const question of GENERIC_QUESTION_NAMES) {
    const ask = asker(client, database, question, { from: options.from, to: options.to });
    const times = { holdscope: [] as number[], generic: [] as number[] };
    let rows = { holdscope: 0, generic: 0 };
    for (let run = 0; run < options.warmUps + options.runs; run++) {
      const h = await timed(ask.holdscope);
      const g = await timed(ask.generic);
      rows = { holdscope: h.rows, generic: g.rows };
      if (run >= options.warmUps) {
        times.holdscope.push(h.ms);
        times.generic.push(g.ms);
      }
      options.onProgress?.(++done);
    }
    const p = (list: number[], q: number) => Math.round(percentile(list, q));
    const ratio = Number((percentile(times.generic, 95) / Math.max(0.001, percentile(times.holdscope, 95))).toFixed(1));
    out.figures.push(
      {
        name: `generic ${question} p95`,
        value: p(times.generic, 95),
        unit: 'ms',
        note: `p50 ${p(times.generic, 50)} ms, ${options.runs} runs`,
      },
      { name: `holdscope ${question} p95`, value: p(times.holdscope, 95), unit: 'ms', note: `p50 ${p(times.holdscope, 50)} ms` },
      {
        name: `generic/holdscope ${question} ratio`,
        value: ratio,
        unit: 'x',
        note: `of the p95s; ${rows.generic === rows.holdscope ? `both answered ${rows.generic} rows` : `rows: generic ${rows.generic}, holdscope ${rows.holdscope}`}`,
      },
    );
    Object.assign(out.json, {
      [`generic_${question}_p95_ms`]: p(times.generic, 95),
      [`holdscope_${question}_p95_ms`]: p(times.holdscope, 95),
      [`generic_holdscope_${question}_ratio`]: ratio,
    });
  }
  return out;
}
