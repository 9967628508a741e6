import express, { type Request, type Response } from 'express';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import { InputError, type ClickHouseClient } from '../../common/index.ts';
import {
  DEFAULT_READ_LIMITS,
  flagThresholdsSchema,
  readWindow,
  runQuery,
  stormReadParams,
  stormRuleOf,
  type FlagThresholds,
  type ReadLimits,
} from '../../queries/index.ts';
import { CHART_NAMES, kvPinnedSpec, resolutionSpec, tailsSpec, timelineSpec, type ChartName } from './specs.ts';

type Row = Record<string, unknown>;
const DEFAULT_RANGE_MS = 3_600_000;

/**
 * Widths of the resolution chart's time buckets (s): the narrowest that keeps a range within MAX_CHART_BUCKETS, so the
 * page's presets up to 24 hours keep one bar a minute and a week gets one per 10 minutes.
 */
const BUCKET_STEPS_S = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
/** Buckets per engine at most: what a 640-pixel chart can show, and what Vega lays out in a blink. */
export const MAX_CHART_BUCKETS = 1440;

/** The resolution chart's bucket width (s) for a range: wider ranges, wider buckets, never more than MAX_CHART_BUCKETS. */
export function chartBucketSeconds(rangeMs: number): number {
  const fits = BUCKET_STEPS_S.find((s) => rangeMs / (s * 1000) <= MAX_CHART_BUCKETS);
  return fits ?? Math.ceil(rangeMs / 1000 / MAX_CHART_BUCKETS / 86400) * 86400;
}

/**
 * from / to / cluster / decode_engine of a chart request: defaults to the last hour, all clusters, all engines; the
 * range is checked as every read's is (queries/read-window.ts).
 */
export function chartWindow(
  query: Request['query'],
  limits: Pick<ReadLimits, 'maxReadWindowMs'> = DEFAULT_READ_LIMITS,
): { from: string; to: string; rangeMs: number; cluster: string; decodeEngine: string } {
  const one = (key: string): string => {
    const v = query[key];
    if (v === undefined) return '';
    if (typeof v !== 'string') throw new InputError(`parameter ${JSON.stringify(key)} must be given once, as a plain value`);
    return v;
  };
  const w = readWindow(one('from') || undefined, one('to') || undefined, limits, { defaultMs: DEFAULT_RANGE_MS });
  return { from: w.from, to: w.to, rangeMs: w.toMs - w.fromMs, cluster: one('cluster'), decodeEngine: one('decode_engine') };
}

/** Runs the chart's named queries and builds its Vega-Lite spec (the same function for the page and the SVG). */
export async function buildChart(
  client: ClickHouseClient,
  database: string,
  name: ChartName,
  query: Request['query'],
  t: FlagThresholds = flagThresholdsSchema.parse({}),
  limits: ReadLimits = DEFAULT_READ_LIMITS,
): Promise<TopLevelSpec> {
  const read = { limits };
  if (name === 'timeline') {
    const requestId = typeof query.request_id === 'string' ? query.request_id : '';
    if (!requestId) throw new InputError('request_id is required');
    const cluster = typeof query.cluster === 'string' ? query.cluster : '';
    const spans = await runQuery<Row>(client, database, 'request_timeline', { request_id: requestId, cluster }, read);
    const lifecycles = await runQuery<Row>(client, database, 'lifecycles_by_request', { request_id: requestId, cluster }, read);
    let late: Row[] = [];
    if (spans.length > 0) {
      let first = Infinity;
      let last = -Infinity;
      for (const s of spans) {
        for (const t of [Date.parse(String(s.start_time)), Date.parse(String(s.end_time))]) {
          if (!Number.isFinite(t)) continue;
          first = Math.min(first, t);
          last = Math.max(last, t);
        }
      }
      // An hour either side of the request's spans, and never wider than a read may be: a request id reused weeks
      // apart shows its late writes of the latest stretch.
      const to = last + 3_600_000;
      const from = Math.max(first - 3_600_000, to - limits.maxReadWindowMs);
      late = await runQuery<Row>(
        client,
        database,
        'late_write_victims',
        { from: new Date(from).toISOString(), to: new Date(to).toISOString(), cluster, request_id: requestId },
        read,
      );
    }
    return timelineSpec(requestId, spans, lifecycles, late);
  }
  const w = chartWindow(query, limits);
  const params = { from: w.from, to: w.to, cluster: w.cluster };
  const byEngine = (rows: Row[]) => (w.decodeEngine ? rows.filter((r) => r.decode_engine === w.decodeEngine) : rows);
  switch (name) {
    case 'resolution': {
      const bucketSeconds = chartBucketSeconds(w.rangeMs);
      const rows = await runQuery<Row>(client, database, 'resolution_mix', { ...params, bucket_seconds: String(bucketSeconds) }, read);
      return resolutionSpec(byEngine(rows), { threshold: t.timeoutHeavyShare, bucketSeconds });
    }
    case 'tails':
      return tailsSpec(await runQuery<Row>(client, database, 'transfer_tails', params, read));
    case 'kv_pinned':
      // The aborts before the range too: the baseline of its first windows (queries/storms.ts).
      return kvPinnedSpec(byEngine(await runQuery<Row>(client, database, 'kv_pinned', { ...params, ...stormReadParams(t) }, read)), {
        rule: stormRuleOf(t),
        pinnedShare: t.pinnedCapacityShare,
        from: w.from,
        to: w.to,
      });
  }
}

/** Renders a Vega-Lite spec to SVG with no canvas and no eval: Vega's own renderer, headless. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** What the chart routes read with: the database, the flags' thresholds and the read limits. */
export interface ChartRouteOptions {
  client: ClickHouseClient;
  database: string;
  flagThresholds?: FlagThresholds;
  readLimits?: ReadLimits;
}

/** GET /charts/:name.json (the Vega-Lite spec, data inline) and GET /charts/:name.svg (the same spec, rendered). */
export function createChartRoutes({ client, database, flagThresholds, readLimits }: ChartRouteOptions): express.Router {
  const router = express.Router();
  router.get('/charts/:file', async (req: Request, res: Response) => {
    const match = /^([a-z_]+)\.(json|svg)$/.exec(String(req.params.file));
    const name = match?.[1] as ChartName | undefined;
    if (!match || !name || !(CHART_NAMES as readonly string[]).includes(name)) {
      res
        .status(404)
        .json({ error: `unknown chart; charts are ${[...CHART_NAMES, 'compare'].map((n) => `${n}.svg`).join(', ')} (and .json)` });
      return;
    }
    // A failure goes to the HTTP foundation's error handler (Express 5 forwards a rejected handler).
    const spec = await buildChart(client, database, name, req.query, flagThresholds, readLimits);
    res.setHeader('Cache-Control', 'no-store');
    if (match[2] === 'json') {
      res.json(spec);
      return;
    }
    res.type('image/svg+xml').send(await renderSvg(spec));
  });
  return router;
}
