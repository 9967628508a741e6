// The Compare view's chart: candidate - baseline per metric with its 95 % interval, one small chart per
// metric, coloured by verdict. GET /charts/compare.json answers the Vega-Lite spec with the comparison it was drawn
// from (usermeta.comparison: the page's table reads the same numbers, so table and chart never disagree, and the arms
// are read once); GET /charts/compare.svg renders that spec on the server. Both take /api/compare's keys.
//
// Why one small chart per metric rather than every difference relative to the baseline on one axis: the baselines
// that matter most are often zero (late writes, unsafe releases, the timeout share of a healthy version), where a
// relative difference is infinite or undefined, and a share's change reads better as percentage points than as a
// ratio of a ratio. Each metric keeps its own unit and scale, with zero marked, so "does the interval cross zero" is
// what the eye sees in every row.
import express, { type Request, type Response } from 'express';
import type { TopLevelSpec } from 'vega-lite';
import {
  compareArms,
  DEFAULT_READ_LIMITS,
  parseCompareRequest,
  type ComparisonReport,
  type MetricComparison,
} from '../../queries/index.ts';
import { stringParams } from '../read-api.ts';
import { renderSvg, type ChartRouteOptions } from './render.ts';

/** The verdicts as the chart colours them; a metric with a difference but no interval (the storm peak) is its own. */
export const VERDICT_COLOURS = {
  better: '#2f7a4a',
  worse: '#c9302c',
  'no detectable difference': '#6b7686',
  'no interval': '#3b6ea5',
} as const;
export type ChartVerdict = keyof typeof VERDICT_COLOURS;

const PLOT_WIDTH = 420;

/** How a metric's values are shown: shares as % and their differences as percentage points. */
export function metricScale(unit: MetricComparison['unit']): { factor: number; unit: string; digits: number } {
  switch (unit) {
    case 'share':
      return { factor: 100, unit: 'pp', digits: 2 };
    case 'ms':
      return { factor: 1, unit: 'ms', digits: 1 };
    case 'per 10,000 holds':
      return { factor: 1, unit: 'per 10k holds', digits: 2 };
    case 'holds':
      return { factor: 1, unit: 'holds', digits: 0 };
  }
}

/** One metric as a row of the chart; bounds the data do not reach (±Infinity, or null from JSON) are null. */
export interface CompareChartRow {
  metric: string;
  label: string;
  unit: string;
  verdict: ChartVerdict;
  difference: number;
  lower: number | null;
  upper: number | null;
  /** Where the interval's rule is drawn: its bounds, or the chart's edge on an unbounded side. */
  plotLower: number;
  plotUpper: number;
  text: string;
  baseline: number | null;
  candidate: number | null;
  mdd: number | null;
  method: string;
}

const finite = (x: number | null | undefined): x is number => typeof x === 'number' && Number.isFinite(x);
const signed = (x: number, digits: number) => `${x > 0 ? '+' : x < 0 ? '−' : '±'}${Math.abs(x).toFixed(digits)}`;

/** The row of a metric with a difference (null for those without: they are drawn as a note). */
export function chartRow(m: MetricComparison): CompareChartRow | null {
  if (!finite(m.difference)) return null;
  const { factor, unit, digits } = metricScale(m.unit);
  const scale = (x: number | null | undefined) => (finite(x) ? x * factor : null);
  const difference = m.difference * factor;
  const lower = m.interval ? scale(m.interval.lower) : null;
  const upper = m.interval ? scale(m.interval.upper) : null;
  const known = [0, difference, ...(lower === null ? [] : [lower]), ...(upper === null ? [] : [upper])];
  const span = Math.max(...known) - Math.min(...known) || Math.abs(difference) || 1;
  // An unbounded side runs to the chart's edge, past everything known: the arrow there says "and beyond".
  const plotLower = m.interval && lower === null ? Math.min(...known) - span / 2 : (lower ?? difference);
  const plotUpper = m.interval && upper === null ? Math.max(...known) + span / 2 : (upper ?? difference);
  const bound = (x: number | null, side: '-' | '+') => (x === null ? (side === '-' ? '−∞' : '+∞') : signed(x, digits));
  const interval = m.interval ? ` [${bound(lower, '-')}, ${bound(upper, '+')}]` : ' (no interval)';
  // An infinite MDD (a quantile the data do not reach) is no number to print: "∞" says it.
  const mdd = m.minimumDetectableDifference === undefined ? null : m.minimumDetectableDifference * factor;
  const mddText = mdd === null ? '' : ` · MDD ±${finite(mdd) ? mdd.toFixed(digits) : '∞'}`;
  return {
    metric: m.metric,
    label: `${m.label} (${unit})`,
    unit,
    verdict: m.verdict ?? 'no interval',
    difference,
    lower,
    upper,
    plotLower,
    plotUpper,
    text: `${signed(difference, digits)}${interval}${mddText}`,
    baseline: scale(m.baseline),
    candidate: scale(m.candidate),
    mdd: finite(mdd) ? mdd : null,
    method: m.method ?? '',
  };
}

const colour = {
  field: 'verdict',
  type: 'nominal',
  title: 'verdict',
  scale: { domain: Object.keys(VERDICT_COLOURS), range: Object.values(VERDICT_COLOURS) },
} as const;

/** One metric's small chart: zero, the interval as a rule (arrows where unbounded), the difference as a point. */
function metricChart(row: CompareChartRow): Record<string, unknown> {
  const pad = (row.plotUpper - row.plotLower) * 0.05 || 1;
  const domain = [Math.min(0, row.plotLower) - pad, Math.max(0, row.plotUpper) + pad];
  const x = { type: 'quantitative', title: null, scale: { domain, nice: false, zero: false }, axis: { tickCount: 5, grid: false } };
  const y = { field: 'label', type: 'nominal', title: null, axis: { labelLimit: 260, labelFontWeight: 'bold' } };
  const tooltip = [
    { field: 'label', type: 'nominal', title: 'metric' },
    { field: 'baseline', type: 'quantitative', format: ',.3~f' },
    { field: 'candidate', type: 'quantitative', format: ',.3~f' },
    { field: 'text', type: 'nominal', title: 'difference [95% interval]' },
    { field: 'verdict', type: 'nominal' },
    { field: 'method', type: 'nominal' },
  ];
  const arrows = [
    ...(row.lower === null && row.verdict !== 'no interval' ? [{ at: row.plotLower, shape: 'triangle-left' }] : []),
    ...(row.upper === null && row.verdict !== 'no interval' ? [{ at: row.plotUpper, shape: 'triangle-right' }] : []),
  ];
  return {
    width: PLOT_WIDTH,
    height: 22,
    data: { values: [row] },
    layer: [
      { mark: { type: 'rule', color: '#999', strokeDash: [3, 3] }, encoding: { x: { datum: 0, ...x } } },
      {
        mark: { type: 'rule', strokeWidth: 2.5 },
        encoding: { y, x: { field: 'plotLower', ...x }, x2: { field: 'plotUpper' }, color: colour, tooltip },
      },
      ...arrows.map((a) => ({
        data: { values: [{ ...row, at: a.at }] },
        mark: { type: 'point', shape: a.shape, filled: true, size: 60 },
        encoding: { y, x: { field: 'at', ...x }, color: colour },
      })),
      {
        mark: { type: 'point', filled: true, size: 80, opacity: 1 },
        encoding: { y, x: { field: 'difference', ...x }, color: colour, tooltip },
      },
      {
        mark: { type: 'text', align: 'left', dx: 10, x: PLOT_WIDTH, fontSize: 11 },
        encoding: { y, text: { field: 'text' }, color: colour },
      },
    ],
  };
}

/** A metric compared without a difference (an arm lacks the data): its label and why, as text. */
function noteChart(m: MetricComparison): Record<string, unknown> {
  return {
    width: PLOT_WIDTH,
    height: 22,
    data: { values: [{ label: `${m.label} (${metricScale(m.unit).unit})`, note: `not compared: ${m.note ?? 'no value'}` }] },
    mark: { type: 'text', align: 'left', x: 0, color: '#6b7686', fontSize: 11, limit: PLOT_WIDTH + 240 },
    encoding: {
      y: { field: 'label', type: 'nominal', title: null, axis: { labelLimit: 260, labelFontWeight: 'bold' } },
      text: { field: 'note' },
    },
  };
}

/**
 * The chart of a comparison: every judged metric (the count of holds, which has no direction, is the table's), each
 * in its own unit; arms named in the subtitle by their selectors (span text: Vega renders it as text).
 */
export function compareSpec(report: ComparisonReport): TopLevelSpec {
  const judged = report.metrics.filter((m) => m.direction !== null);
  const confidence = Math.round(report.confidence * 100);
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `Candidate − baseline per metric, with ${confidence}% intervals`,
      subtitle: [`baseline: ${report.baseline.description}`, `candidate: ${report.candidate.description}`],
      anchor: 'start',
      subtitleFontSize: 11,
    },
    vconcat: judged.map((m) => {
      const row = chartRow(m);
      return row ? metricChart(row) : noteChart(m);
    }),
    spacing: 4,
    config: { view: { stroke: null }, axisY: { ticks: false, domain: false }, concat: { spacing: 4 } },
    resolve: { scale: { x: 'independent', y: 'independent' } },
    usermeta: { comparison: report },
    // Through unknown: the small charts are built as plain objects (their layers vary with the data).
  } as unknown as TopLevelSpec;
}

/** GET /charts/compare.json and /charts/compare.svg: /api/compare's keys, parsed by the same function. */
export function createCompareChartRoutes({
  client,
  database,
  flagThresholds,
  readLimits = DEFAULT_READ_LIMITS,
}: ChartRouteOptions): express.Router {
  const router = express.Router();
  router.get('/charts/:file', async (req: Request, res: Response, next) => {
    const format = /^compare\.(json|svg)$/.exec(String(req.params.file))?.[1];
    if (!format) return next();
    const request = parseCompareRequest(stringParams(req.query), readLimits);
    const spec = compareSpec(await compareArms(client, database, request, { thresholds: flagThresholds, limits: readLimits }));
    res.setHeader('Cache-Control', 'no-store');
    if (format === 'json') {
      res.json(spec);
      return;
    }
    res.type('image/svg+xml').send(await renderSvg(spec));
  });
  return router;
}
