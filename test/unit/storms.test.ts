import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { kvPinnedSpec, MAX_KV_CHART_POINTS } from '../../dashboards/charts/specs.ts';
import { Rng } from '../../emitter/sim/rng.ts';
import { firstStormWindow, STORM_WINDOW_MS, stormWindows, trailingMedianAborts, type StormRule } from '../../queries/index.ts';

const RULE: StormRule = { multiplier: 3, trailingWindows: 30, minAborts: 5 };

/** The definition as it was written before: every window of the range, in turn, a zero where no row is. */
function denseReference(windows: { t: number; aborts: number }[], firstMs: number, lastMs: number, rule: StormRule) {
  const at = new Map(windows.map((w) => [w.t, w]));
  const history: number[] = [];
  const out: { t: number; baseline: number; storm: boolean }[] = [];
  const median = (xs: number[]) => {
    if (xs.length === 0) return 0;
    const s = [...xs].sort((a, b) => a - b);
    const mid = Math.floor(s.length / 2);
    return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
  };
  for (let t = firstMs; t <= lastMs; t += STORM_WINDOW_MS) {
    const w = at.get(t);
    const count = w?.aborts ?? 0;
    const baseline = median(history.slice(-rule.trailingWindows));
    history.push(count);
    if (w) out.push({ t, baseline, storm: count >= rule.minAborts && count >= rule.multiplier * baseline });
  }
  return out;
}

/** Sparse windows: quiet stretches, busy stretches, and a storm or two, as kv_pinned returns them. */
function sparseWindows(seed: number, firstMs: number, count: number) {
  const rng = new Rng(seed);
  const windows: { t: number; aborts: number }[] = [];
  for (let k = 0; k < count; k++) {
    if (rng.next() < 0.35) continue;
    const storm = rng.next() < 0.05;
    windows.push({ t: firstMs + k * STORM_WINDOW_MS, aborts: Math.floor(rng.next() * (storm ? 40 : 6)) });
  }
  return windows;
}

describe('abort storms (one definition for the detection, the chart and the gauges)', () => {
  it('equals the dense definition window for window, iterating only over the rows', () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const fromMs = Date.UTC(2026, 11, 1) + 3_000;
      const first = firstStormWindow(fromMs);
      const windows = sparseWindows(seed, first, 2000);
      const sparse = stormWindows(windows, first, RULE).map(({ window, baseline, storm }) => ({ t: window.t, baseline, storm }));
      assert.deepEqual(sparse, denseReference(windows, first, first + 2000 * STORM_WINDOW_MS, RULE), `seed ${seed}`);
      assert.ok(sparse.some((w) => w.storm) && sparse.some((w) => !w.storm), `seed ${seed} has storms and calm`);
      const at = first + 1500 * STORM_WINDOW_MS;
      assert.equal(
        trailingMedianAborts(windows, at, first, RULE.trailingWindows),
        denseReference([...windows, { t: at, aborts: 0 }], first, at, RULE).at(-1)?.baseline,
      );
    }
  });

  it('costs the rows, not the range: two centuries with a handful of windows', () => {
    const first = firstStormWindow(Date.UTC(1926, 0, 1));
    const windows = [
      { t: Date.UTC(2026, 0, 1), aborts: 9 },
      { t: Date.UTC(2026, 0, 1) + STORM_WINDOW_MS, aborts: 2 },
    ];
    const started = performance.now();
    const result = stormWindows(windows, first, RULE);
    assert.ok(performance.now() - started < 50, 'no per-window work over 6 billion seconds');
    // Thirty quiet windows before: a baseline of 0, so the first is a storm; the second has 9 before it among zeros.
    assert.deepEqual(
      result.map((r) => [r.baseline, r.storm]),
      [
        [0, true],
        [0, false],
      ],
    );
  });
});

describe('the KV chart', () => {
  const row = (engine: string, t: number, aborts: number, pinned: number) => ({
    cluster: 'default',
    decode_engine: engine,
    window_start: new Date(t).toISOString(),
    aborts,
    peak_pinned_slots: pinned,
    capacity_slots: 1000,
  });
  type Point = { engine: string; t: number; t_end: number; pinned: number; aborts: number; storm: boolean };
  const pointsOf = (spec: object) => (spec as { data: { values: Point[] } }).data.values;

  it('draws every 10 s window of a short range, storms as the detection has them', () => {
    const first = Date.UTC(2026, 11, 1);
    const windows = sparseWindows(7, first, 600);
    const spec = kvPinnedSpec(
      windows.map((w) => row('d0', w.t, w.aborts, w.aborts * 10)),
      { from: new Date(first).toISOString(), to: new Date(first + 6_000_000).toISOString() },
    );
    const points = pointsOf(spec);
    assert.deepEqual(
      points.map((p) => [p.t, p.storm]),
      stormWindows(windows, first, RULE).map((w) => [w.window.t, w.storm]),
    );
    assert.ok(points.every((p) => p.t_end - p.t === STORM_WINDOW_MS));
  });

  it('draws at most MAX_KV_CHART_POINTS per engine over a week, keeping peaks and storms', () => {
    const first = Date.UTC(2026, 11, 1);
    const week = 7 * 86_400_000;
    const rows = [];
    for (const engine of ['d0', 'd1']) {
      for (let t = first; t < first + week; t += STORM_WINDOW_MS) rows.push(row(engine, t, 1, 100));
    }
    // One storm with a peak, in the middle of the week on d1.
    const stormAt = first + 3 * 86_400_000;
    rows[rows.findIndex((r) => r.decode_engine === 'd1' && r.window_start === new Date(stormAt).toISOString())] = row(
      'd1',
      stormAt,
      50,
      900,
    );
    const started = performance.now();
    const points = pointsOf(kvPinnedSpec(rows, { from: new Date(first).toISOString(), to: new Date(first + week).toISOString() }));
    const took = performance.now() - started;
    for (const engine of ['d0', 'd1']) {
      const mine = points.filter((p) => p.engine === engine);
      assert.ok(mine.length <= MAX_KV_CHART_POINTS && mine.length > MAX_KV_CHART_POINTS / 2, `${engine}: ${mine.length} points`);
    }
    const storms = points.filter((p) => p.storm);
    assert.equal(storms.length, 1);
    assert.ok(
      storms[0]?.engine === 'd1' && storms[0].t <= stormAt && stormAt < storms[0].t_end && storms[0].pinned === 900,
      JSON.stringify(storms[0]),
    );
    assert.ok(took < 2000, `${Math.round(took)} ms for 120,960 windows`);
  });
});
