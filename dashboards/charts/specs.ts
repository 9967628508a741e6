// Vega-Lite specs of the on-call charts: pure functions, query rows in, spec out. The same spec is embedded
// by the page (GET /charts/:name.json) and rendered to SVG on the server (GET /charts/:name.svg).
import type { TopLevelSpec } from 'vega-lite';
import {
  firstStormWindow,
  flagThresholdsSchema,
  judgeEngineWindows,
  STORM_WINDOW_MS,
  stormLookbackMs,
  stormRuleOf,
  type StormRule,
} from '../../queries/index.ts';

type Row = Record<string, unknown>;

const num = (v: unknown): number => (typeof v === 'number' ? v : Number(v ?? 0) || 0);
const str = (v: unknown): string => (v === null || v === undefined ? '' : String(v));
/** ClickHouse times arrive as ISO strings in UTC; charts get epoch milliseconds so no timezone is guessed. */
const ms = (v: unknown): number | null => {
  if (v === null || v === undefined || v === '') return null;
  const s = String(v);
  const t = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(s) ? s : `${s.replace(' ', 'T')}Z`);
  return Number.isFinite(t) ? t : null;
};

const WIDTH = 640;
const utcAxis = { format: '%H:%M:%S', labelOverlap: true } as const;
const empty = (title: string): TopLevelSpec => ({
  $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
  title,
  width: WIDTH,
  height: 40,
  data: { values: [{ text: 'no data in this range' }] },
  mark: { type: 'text', color: '#666' },
  encoding: { text: { field: 'text' } },
});

/** (a) Holds resolved by drain / timeout / still open per decode engine over time, with the timeout share and its threshold. */
// eslint-disable-next-line max-lines-per-function -- a declarative Vega-Lite spec
export function resolutionSpec(rows: Row[], options: { threshold?: number; bucketSeconds?: number } = {}): TopLevelSpec {
  const threshold = options.threshold ?? 0.05;
  const bucketMs = (options.bucketSeconds ?? 60) * 1000;
  if (rows.length === 0) return empty('Hold resolution');
  const counts = rows.flatMap((r) => {
    const t = ms(r.bucket);
    const base = { decode_engine: str(r.decode_engine), cluster: str(r.cluster), t, t_end: t === null ? null : t + bucketMs };
    return [
      { ...base, resolution: 'drained', holds: num(r.drained) },
      { ...base, resolution: 'timeout', holds: num(r.timeouts) },
      { ...base, resolution: 'open', holds: num(r.open) },
    ];
  });
  const shares = rows.map((r) => ({
    decode_engine: str(r.decode_engine),
    t: ms(r.bucket),
    timeout_share: num(r.timeout_share),
    resolved: num(r.drained) + num(r.timeouts),
  }));
  const x = { field: 't', type: 'temporal', title: 'hold start (UTC)', scale: { type: 'utc' }, axis: utcAxis } as const;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: 'Holds resolved by drain / timeout / still open, per decode engine',
    datasets: { counts, shares },
    data: { name: 'counts' },
    vconcat: [
      {
        facet: {
          row: {
            field: 'decode_engine',
            type: 'nominal',
            title: null,
            header: { labelAngle: 0, labelAlign: 'left', labelFontWeight: 'bold' },
          },
        },
        spec: {
          width: WIDTH,
          height: 70,
          mark: { type: 'bar' },
          encoding: {
            x,
            x2: { field: 't_end' },
            y: { aggregate: 'sum', field: 'holds', type: 'quantitative', title: 'holds', stack: 'zero' },
            color: {
              field: 'resolution',
              type: 'nominal',
              scale: { domain: ['drained', 'timeout', 'open'], range: ['#4c9f70', '#d9534f', '#f0ad4e'] },
              title: 'resolution',
            },
            tooltip: [
              { field: 'decode_engine', type: 'nominal' },
              { field: 'resolution', type: 'nominal' },
              { field: 'holds', aggregate: 'sum', type: 'quantitative' },
              { field: 't', type: 'temporal', format: '%H:%M', scale: { type: 'utc' } },
            ],
          },
        },
      },
      {
        width: WIDTH,
        height: 140,
        data: { name: 'shares' },
        layer: [
          {
            mark: { type: 'line', point: true },
            encoding: {
              x,
              y: { field: 'timeout_share', type: 'quantitative', title: 'timeout share', axis: { format: '.0%' } },
              color: { field: 'decode_engine', type: 'nominal', title: 'decode engine', scale: { scheme: 'tableau10' } },
              tooltip: [
                { field: 'decode_engine', type: 'nominal' },
                { field: 'timeout_share', type: 'quantitative', format: '.1%' },
                { field: 'resolved', type: 'quantitative' },
              ],
            },
          },
          {
            data: { values: [{ threshold }] },
            layer: [
              {
                mark: { type: 'rule', color: '#d9534f', strokeDash: [6, 4] },
                encoding: { y: { field: 'threshold', type: 'quantitative' } },
              },
              {
                mark: { type: 'text', color: '#d9534f', align: 'left', dx: 4, dy: -6, x: 0 },
                encoding: {
                  y: { field: 'threshold', type: 'quantitative' },
                  text: { value: `timeout threshold ${Math.round(threshold * 100)}%` },
                },
              },
            ],
          },
        ],
      },
    ],
    resolve: { scale: { color: 'independent' } },
  } as TopLevelSpec;
}

/** (b) Transfer tails: p50 / p90 / p99 / max per prefill engine and backend, against the hold timeout. */
export function tailsSpec(rows: Row[]): TopLevelSpec {
  if (rows.length === 0) return empty('Transfer tails');
  const values = rows.map((r) => ({
    engine: `${str(r.prefill_engine)} (${str(r.backend)})${r.cluster ? ` · ${str(r.cluster)}` : ''}`,
    p50: num(r.p50_ms),
    p90: num(r.p90_ms),
    p99: num(r.p99_ms),
    max: num(r.max_ms),
    timeout: num(r.timeout_ms),
    holds: num(r.holds),
    over_timeout: num(r.over_timeout),
  }));
  const y = { field: 'engine', type: 'nominal', title: 'prefill engine (backend)' } as const;
  const x = { type: 'quantitative', title: 'transfer tail after ABORT (ms, symlog)', scale: { type: 'symlog', constant: 10 } } as const;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: 'Transfer tails per prefill engine vs the hold timeout',
    width: WIDTH,
    height: { step: 34 },
    data: { values },
    layer: [
      { mark: { type: 'rule', color: '#999' }, encoding: { y, x: { field: 'p50', ...x }, x2: { field: 'max' } } },
      { mark: { type: 'bar', height: 12, color: '#7aa6c2' }, encoding: { y, x: { field: 'p50', ...x }, x2: { field: 'p99' } } },
      {
        transform: [{ fold: ['p50', 'p90', 'p99', 'max'], as: ['quantile', 'ms'] }],
        mark: { type: 'point', filled: true, size: 70 },
        encoding: {
          y,
          x: { field: 'ms', ...x },
          color: {
            field: 'quantile',
            type: 'nominal',
            scale: { domain: ['p50', 'p90', 'p99', 'max', 'hold timeout'], range: ['#2c7fb8', '#41b6c4', '#253494', '#555', '#d9534f'] },
            title: 'quantile',
          },
          tooltip: [
            { field: 'engine', type: 'nominal' },
            { field: 'quantile', type: 'nominal' },
            { field: 'ms', type: 'quantitative', format: ',.1f' },
            { field: 'holds', type: 'quantitative' },
            { field: 'over_timeout', type: 'quantitative', title: 'tails over timeout' },
          ],
        },
      },
      {
        transform: [{ calculate: "'hold timeout'", as: 'quantile' }],
        mark: { type: 'tick', thickness: 3, size: 26 },
        encoding: {
          y,
          x: { field: 'timeout', ...x },
          color: { field: 'quantile', type: 'nominal' },
          tooltip: [
            { field: 'engine', type: 'nominal' },
            { field: 'timeout', type: 'quantitative', title: 'hold timeout (ms)' },
          ],
        },
      },
    ],
  } as TopLevelSpec;
}

/** Storm windows as the kv_capacity_exhaustion detection defines them (queries/storms.ts). */
export interface StormOptions {
  /** The storm rule of the flags' thresholds (stormRuleOf); their defaults when absent. */
  rule?: StormRule;
  /** kv_capacity_exhaustion's share of capacity, drawn as the threshold line. */
  pinnedShare?: number;
  from?: string;
  to?: string;
}

/**
 * Points per engine the KV chart draws at most: its 640 pixels show no more, and Vega lays out and renders every one
 * (a week of 10 s windows is 60,480 per engine). Up to 4 hours every 10 s window is its own point; beyond, windows
 * are merged into wider ones: the peak pinned, the aborts summed, shaded when any was a storm.
 */
export const MAX_KV_CHART_POINTS = 1440;

interface KvWindow {
  t: number;
  aborts: number;
  pinned: number;
  capacity: number;
  /** kv_pinned's engine_since: the start of the engine's storm warm-up (NaN: unknown). */
  since: number;
}

/** (c) KV slots pinned by holds vs capacity per decode engine over time, abort-storm windows shaded. */
// eslint-disable-next-line max-lines-per-function -- a declarative Vega-Lite spec
export function kvPinnedSpec(rows: Row[], options: StormOptions = {}): TopLevelSpec {
  if (rows.length === 0) return empty('KV slots pinned by holds');
  const defaults = flagThresholdsSchema.parse({});
  const rule = options.rule ?? stormRuleOf(defaults);
  const share = options.pinnedShare ?? defaults.pinnedCapacityShare;
  const byEngine = new Map<string, KvWindow[]>();
  let earliest = Infinity;
  let latest = -Infinity;
  for (const r of rows) {
    const t = ms(r.window_start);
    if (t === null) continue;
    earliest = Math.min(earliest, t);
    latest = Math.max(latest, t);
    const key = `${str(r.decode_engine)}${r.cluster && r.cluster !== 'default' ? ` · ${str(r.cluster)}` : ''}`;
    const list = byEngine.get(key) ?? [];
    list.push({
      t,
      aborts: num(r.aborts),
      pinned: num(r.peak_pinned_slots),
      capacity: num(r.capacity_slots),
      since: ms(r.engine_since) ?? NaN,
    });
    byEngine.set(key, list);
  }
  if (byEngine.size === 0) return empty('KV slots pinned by holds');
  const first = firstStormWindow(ms(options.from) ?? earliest);
  const last = Math.min(ms(options.to) ?? latest, latest);
  const pointMs = STORM_WINDOW_MS * Math.max(1, Math.ceil((last - first + STORM_WINDOW_MS) / STORM_WINDOW_MS / MAX_KV_CHART_POINTS));
  const values: Row[] = [];
  for (const [engine, windows] of byEngine) {
    windows.sort((a, b) => a.t - b.t);
    const capacity = windows.reduce((max, w) => Math.max(max, w.capacity), 0);
    const points = new Map<
      number,
      {
        engine: string;
        t: number;
        t_end: number;
        pinned: number;
        capacity: number;
        share: number;
        aborts: number;
        storm: boolean;
        threshold: number;
      }
    >();
    // The one storm definition with its warm-up; rows before the range (kv_pinned's baseline_lookback_seconds) are the
    // baseline's only.
    const since = windows.reduce((min, w) => Math.min(min, Number.isFinite(w.since) ? w.since : Infinity), Infinity);
    for (const { window: w, storm } of judgeEngineWindows(windows, since, first - stormLookbackMs(rule), rule)) {
      if (w.t < first || w.t > last) continue;
      const t = first + Math.floor((w.t - first) / pointMs) * pointMs;
      const point = points.get(t) ?? {
        engine,
        t,
        t_end: t + pointMs,
        pinned: 0,
        capacity,
        share: 0,
        aborts: 0,
        storm: false,
        threshold: share,
      };
      point.pinned = Math.max(point.pinned, w.pinned);
      point.share = capacity > 0 ? point.pinned / capacity : 0;
      point.aborts += w.aborts;
      point.storm ||= storm;
      points.set(t, point);
    }
    for (const point of points.values()) values.push(point);
  }
  const windowText = `${pointMs / 1000} s window`;
  const x = { field: 't', type: 'temporal', title: `${windowText} (UTC)`, scale: { type: 'utc' }, axis: utcAxis } as const;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: 'KV slots pinned by holds, as a share of capacity (abort storms shaded)',
      subtitle: `peak per ${windowText}; dashed: the kv_capacity_exhaustion threshold`,
    },
    data: { values },
    facet: {
      row: { field: 'engine', type: 'nominal', title: null, header: { labelAngle: 0, labelAlign: 'left', labelFontWeight: 'bold' } },
    },
    spec: {
      width: WIDTH,
      height: 90,
      layer: [
        // Only with a storm to shade: a layer whose filter leaves no row has an infinite extent, and Vega warns of it.
        ...(values.some((v) => v.storm)
          ? [
              {
                transform: [{ filter: 'datum.storm' }],
                mark: { type: 'rect', color: '#f4c7c3', opacity: 0.8 } as const,
                encoding: {
                  x,
                  x2: { field: 't_end' },
                  tooltip: [{ field: 'aborts', type: 'quantitative', title: 'aborts (storm window)' }],
                },
              },
            ]
          : []),
        {
          mark: { type: 'area', line: { color: '#3b6ea5' }, color: '#9ec3e6', opacity: 0.8, interpolate: 'step-after' },
          encoding: {
            x,
            y: { field: 'share', type: 'quantitative', title: 'of capacity', axis: { format: '.0%' }, scale: { domainMin: 0, nice: true } },
            tooltip: [
              { field: 'engine', type: 'nominal' },
              { field: 't', type: 'temporal', format: '%H:%M:%S', scale: { type: 'utc' } },
              { field: 'pinned', type: 'quantitative', title: 'peak pinned slots', format: ',' },
              { field: 'capacity', type: 'quantitative', title: 'capacity slots', format: ',' },
              { field: 'aborts', type: 'quantitative' },
            ],
          },
        },
        {
          mark: { type: 'rule', color: '#d9534f', strokeDash: [6, 4] },
          encoding: {
            y: { aggregate: 'max', field: 'threshold', type: 'quantitative' },
            tooltip: [
              { aggregate: 'max', field: 'threshold', type: 'quantitative', format: '.0%', title: 'kv_capacity_exhaustion threshold' },
            ],
          },
        },
      ],
    },
    resolve: { scale: { y: 'independent' } },
  } as TopLevelSpec;
}

/** (e) One request's timeline: a Gantt of its spans per engine/rank and generation, with release, timeout and late writes marked. */
// eslint-disable-next-line max-lines-per-function -- a declarative Vega-Lite spec
export function timelineSpec(requestId: string, spans: Row[], lifecycles: Row[] = [], lateWrites: Row[] = []): TopLevelSpec {
  if (spans.length === 0) return empty(`Request ${requestId}: no spans`);
  const bars = spans.map((s) => {
    const start = ms(s.start_time) ?? 0;
    const end = Math.max(ms(s.end_time) ?? start, start);
    const rank = num(s.rank);
    return {
      lane: `g${num(s.generation)} ${str(s.engine_id)}${rank >= 0 ? ` r${rank}` : ''}`,
      name: str(s.name),
      start,
      end,
      instant: end - start < 1 ? 1 : 0,
      duration_ms: num(s.duration_ms),
      detail: [s.transfer_status, s.release_reason, s.timeout_action, s.admission_outcome, s.checksum_outcome]
        .map(str)
        .filter(Boolean)
        .join(' '),
      chunk: num(s.chunk_index),
    };
  });
  const markers: Row[] = [];
  for (const l of lifecycles) {
    const g = num(l.generation);
    const release = ms(l.release_at);
    if (release !== null)
      markers.push({ t: release, kind: 'release', label: `g${g} release${l.release_reason ? ` (${str(l.release_reason)})` : ''}` });
    const hold = ms(l.hold_start);
    if (hold !== null && num(l.hold_timeout_ms) > 0)
      markers.push({ t: hold + num(l.hold_timeout_ms), kind: 'timeout', label: `g${g} hold timeout` });
  }
  for (const s of spans) {
    if (str(s.name) === 'pd.timeout') markers.push({ t: ms(s.start_time), kind: 'timeout', label: `g${num(s.generation)} timeout fired` });
    if (lifecycles.length === 0 && str(s.name) === 'pd.release')
      markers.push({ t: ms(s.start_time), kind: 'release', label: `g${num(s.generation)} release` });
  }
  const writes = new Map<string, Row>();
  for (const w of lateWrites) {
    const key = `${num(w.generation)}/${num(w.rank)}/${num(w.chunk_index)}`;
    const entry = writes.get(key) ?? {
      t: ms(w.landed_at),
      kind: 'late write',
      label: `late write g${num(w.generation)} r${num(w.rank)} chunk ${num(w.chunk_index)}`,
      victims: 0,
    };
    if (w.victim_request_id) entry.victims = num(entry.victims) + 1;
    writes.set(key, entry);
  }
  markers.push(...writes.values());
  const lanes = [...new Set(bars.map((b) => b.lane))];
  const x = { type: 'temporal', title: 'time (UTC)', scale: { type: 'utc' }, axis: { format: '%H:%M:%S.%L', labelOverlap: true } } as const;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: `Request ${requestId}`, subtitle: 'spans per engine/rank and generation; release, timeout and late writes marked' },
    width: WIDTH,
    height: Math.max(120, lanes.length * 22),
    layer: [
      {
        data: { values: bars },
        mark: { type: 'bar', height: 14, cornerRadius: 2 },
        encoding: {
          y: { field: 'lane', type: 'nominal', title: 'generation engine/rank', sort: lanes },
          x: { field: 'start', ...x },
          x2: { field: 'end' },
          color: { field: 'name', type: 'nominal', title: 'span', scale: { scheme: 'tableau10' } },
          tooltip: [
            { field: 'name', type: 'nominal' },
            { field: 'lane', type: 'nominal' },
            { field: 'duration_ms', type: 'quantitative', format: ',.2f' },
            { field: 'detail', type: 'nominal' },
          ],
        },
      },
      {
        data: { values: bars },
        transform: [{ filter: 'datum.instant' }],
        mark: { type: 'tick', thickness: 2, size: 16 },
        encoding: {
          y: { field: 'lane', type: 'nominal', sort: lanes },
          x: { field: 'start', ...x },
          color: { field: 'name', type: 'nominal' },
          tooltip: [
            { field: 'name', type: 'nominal' },
            { field: 'detail', type: 'nominal' },
          ],
        },
      },
      {
        data: { values: markers },
        layer: [
          {
            mark: { type: 'rule', strokeWidth: 1.5 },
            encoding: {
              x: { field: 't', ...x },
              strokeDash: {
                field: 'kind',
                type: 'nominal',
                scale: {
                  domain: ['release', 'timeout', 'late write'],
                  range: [
                    [1, 0],
                    [6, 3],
                    [2, 2],
                  ],
                },
                legend: null,
              },
              stroke: {
                field: 'kind',
                type: 'nominal',
                title: 'marker',
                scale: { domain: ['release', 'timeout', 'late write'], range: ['#222', '#e08a00', '#d62728'] },
              },
              tooltip: [
                { field: 'label', type: 'nominal' },
                { field: 't', type: 'temporal', format: '%H:%M:%S.%L', scale: { type: 'utc' } },
              ],
            },
          },
          {
            mark: { type: 'text', angle: 270, align: 'right', baseline: 'bottom', dx: -2, dy: -2, y: 0, fontSize: 10 },
            encoding: {
              x: { field: 't', ...x },
              text: { field: 'label' },
              color: {
                field: 'kind',
                type: 'nominal',
                scale: { domain: ['release', 'timeout', 'late write'], range: ['#222', '#e08a00', '#d62728'] },
                legend: null,
              },
            },
          },
        ],
      },
    ],
    resolve: { scale: { color: 'independent' } },
  } as TopLevelSpec;
}

export const CHART_NAMES = ['resolution', 'tails', 'kv_pinned', 'timeline'] as const;
export type ChartName = (typeof CHART_NAMES)[number];
