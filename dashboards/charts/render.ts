import express, { type Request, type Response } from 'express';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import { InputError, type ClickHouseClient, type Logger } from '../../common/index.ts';
import { flagThresholdsSchema, runQuery, type FlagThresholds } from '../../queries/index.ts';
import { CHART_NAMES, kvPinnedSpec, resolutionSpec, tailsSpec, timelineSpec, type ChartName } from './specs.ts';
import { sendError } from '../http-errors.ts';

type Row = Record<string, unknown>;
const DEFAULT_RANGE_MS = 3_600_000;

/** from / to / cluster / decode_engine of a chart request: defaults to the last hour, all clusters, all engines. */
export function chartWindow(query: Request['query']): { from: string; to: string; cluster: string; decodeEngine: string } {
  const one = (key: string): string => {
    const v = query[key];
    if (v === undefined) return '';
    if (typeof v !== 'string') throw new InputError(`parameter ${JSON.stringify(key)} must be given once, as a plain value`);
    return v;
  };
  const to = one('to') || new Date().toISOString();
  const from = one('from') || new Date(Date.parse(to) - DEFAULT_RANGE_MS).toISOString();
  for (const [k, v] of [['from', from], ['to', to]] as const) if (!Number.isFinite(Date.parse(v))) throw new InputError(`${k}: expected an ISO 8601 time`);
  return { from, to, cluster: one('cluster'), decodeEngine: one('decode_engine') };
}

/** Runs the chart's named queries and builds its Vega-Lite spec (the same function for the page and the SVG). */
export async function buildChart(
  client: ClickHouseClient,
  database: string,
  name: ChartName,
  query: Request['query'],
  t: FlagThresholds = flagThresholdsSchema.parse({}),
): Promise<TopLevelSpec> {
  if (name === 'timeline') {
    const requestId = typeof query.request_id === 'string' ? query.request_id : '';
    if (!requestId) throw new InputError('request_id is required');
    const cluster = typeof query.cluster === 'string' ? query.cluster : '';
    const spans = await runQuery<Row>(client, database, 'request_timeline', { request_id: requestId, cluster });
    const lifecycles = await runQuery<Row>(client, database, 'lifecycles_by_request', { request_id: requestId, cluster });
    let late: Row[] = [];
    if (spans.length > 0) {
      const times = spans.flatMap((s) => [Date.parse(String(s.start_time)), Date.parse(String(s.end_time))]).filter(Number.isFinite);
      const from = new Date(Math.min(...times) - 3_600_000).toISOString();
      const to = new Date(Math.max(...times) + 3_600_000).toISOString();
      late = await runQuery<Row>(client, database, 'late_write_victims', { from, to, cluster, request_id: requestId });
    }
    return timelineSpec(requestId, spans, lifecycles, late);
  }
  const w = chartWindow(query);
  const params = { from: w.from, to: w.to, cluster: w.cluster };
  const byEngine = (rows: Row[]) => (w.decodeEngine ? rows.filter((r) => r.decode_engine === w.decodeEngine) : rows);
  switch (name) {
    case 'resolution':
      return resolutionSpec(byEngine(await runQuery<Row>(client, database, 'resolution_mix', params)), { threshold: t.timeoutHeavyShare });
    case 'tails':
      return tailsSpec(await runQuery<Row>(client, database, 'transfer_tails', params));
    case 'kv_pinned':
      return kvPinnedSpec(byEngine(await runQuery<Row>(client, database, 'kv_pinned', params)), {
        multiplier: t.stormMultiplier,
        trailingWindows: t.stormTrailingWindows,
        minAborts: t.stormMinAborts,
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


/** GET /charts/:name.json (the Vega-Lite spec, data inline) and GET /charts/:name.svg (the same spec, rendered). */
export function createChartRoutes({ client, database, log, flagThresholds }: { client: ClickHouseClient; database: string; log: Logger; flagThresholds?: FlagThresholds }): express.Router {
  const router = express.Router();
  router.get('/charts/:file', async (req: Request, res: Response) => {
    const match = /^([a-z_]+)\.(json|svg)$/.exec(String(req.params.file));
    const name = match?.[1] as ChartName | undefined;
    if (!match || !name || !(CHART_NAMES as readonly string[]).includes(name)) {
      res.status(404).json({ error: `unknown chart; charts are ${CHART_NAMES.map((n) => `${n}.svg`).join(', ')} (and .json)` });
      return;
    }
    try {
      const spec = await buildChart(client, database, name, req.query, flagThresholds);
      res.setHeader('Cache-Control', 'no-store');
      if (match[2] === 'json') {
        res.json(spec);
        return;
      }
      res.type('image/svg+xml').send(await renderSvg(spec));
    } catch (error) {
      sendError(res, log, error, 'chart request');
    }
  });
  return router;
}
