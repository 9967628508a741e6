import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { kvPinnedSpec, MAX_KV_CHART_POINTS } from '../../dashboards/charts/specs.ts';
import { Rng } from '../../common/index.ts';
import { coveredWindows, kvGauges } from '../../dashboards/lifecycle-metrics/kv.ts';
import {
  baselineReadyFrom,
  firstStormWindow,
  flagThresholdsSchema,
  judgeEngineWindows,
  judgePinnedRows,
  STORM_WINDOW_MS,
  stormLookbackMs,
  stormWindows,
  trailingMedianAborts,
  type PinnedRow,
  type StormRule,
} from '../../queries/index.ts';

// The defaults of flagThresholdsSchema, which the chart takes when given no rule.
const RULE: StormRule = { multiplier: 3, trailingWindows: 30, minAborts: 5, warmUpWindows: 6 };

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
      // Past the warm-up from the first window on (the engine ran before the series): the baseline arithmetic alone.
      const sparse = stormWindows(windows, first, RULE, -Infinity).map(({ window, baseline, storm }) => ({ t: window.t, baseline, storm }));
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
    const result = stormWindows(windows, first, RULE, baselineReadyFrom(first, first, RULE.trailingWindows));
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
  const row = (engine: string, t: number, aborts: number, pinned: number, sinceMs = Date.UTC(2026, 11, 1)) => ({
    cluster: 'default',
    decode_engine: engine,
    window_start: new Date(t).toISOString(),
    aborts,
    peak_pinned_slots: pinned,
    capacity_slots: 1000,
    engine_since: new Date(sinceMs).toISOString(),
  });
  type Point = { engine: string; t: number; t_end: number; pinned: number; aborts: number; storm: boolean };
  const pointsOf = (spec: object) => (spec as { data: { values: Point[] } }).data.values;

  it('draws every 10 s window of a short range, storms as the detection has them, none during the warm-up', () => {
    const first = Date.UTC(2026, 11, 1);
    const windows = sparseWindows(7, first, 600);
    // The engine's data starts with the range: its first window and 6 more are its warm-up.
    const spec = kvPinnedSpec(
      windows.map((w) => row('d0', w.t, w.aborts, w.aborts * 10, first)),
      { from: new Date(first).toISOString(), to: new Date(first + 6_000_000).toISOString() },
    );
    const points = pointsOf(spec);
    const verdicts = judgeEngineWindows(windows, first, first - stormLookbackMs(RULE), RULE);
    assert.deepEqual(
      points.map((p) => [p.t, p.storm]),
      verdicts.map((w) => [w.window.t, w.storm]),
    );
    assert.ok(points.every((p) => p.t_end - p.t === STORM_WINDOW_MS));
    const warmUpEnd = first + (RULE.warmUpWindows + 1) * STORM_WINDOW_MS;
    assert.ok(!points.some((p) => p.storm && p.t < warmUpEnd), 'no storm shaded during the warm-up');
    assert.ok(
      points.some((p) => p.storm && p.t >= warmUpEnd),
      'storms after it',
    );
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

describe('the storm warm-up', () => {
  const first = Date.UTC(2026, 11, 1, 12);
  const T = RULE.trailingWindows * STORM_WINDOW_MS;

  it('gives no verdict before the engine has a minute of whole windows of its own, and a cold start is no storm', () => {
    // ack-loss from a cold start: a steady 16 aborts a window from the engine's first second (the first window partial).
    const since = first + 7_300;
    const windows = Array.from({ length: 90 }, (_, k) => ({ t: first + k * STORM_WINDOW_MS, aborts: k === 0 ? 4 : 16 }));
    const verdicts = judgeEngineWindows(windows, since, first, RULE);
    const readyFrom = baselineReadyFrom(since, first, RULE.warmUpWindows);
    assert.equal(
      readyFrom,
      first + (RULE.warmUpWindows + 1) * STORM_WINDOW_MS,
      'the (partial) window of the first data, then 6 whole ones',
    );
    for (const v of verdicts) assert.equal(v.ready, v.window.t >= readyFrom, new Date(v.window.t).toISOString());
    assert.deepEqual(
      verdicts.filter((v) => v.storm),
      [],
    );
    // Without the warm-up the same windows are storms: the baseline's missing windows are zeros.
    assert.ok(stormWindows(windows, first, RULE, -Infinity).some((v) => v.storm));
  });

  it('an engine that ran without aborts is past its warm-up: its first burst is judged', () => {
    const windows = [{ t: first + 40 * STORM_WINDOW_MS, aborts: 12 }];
    // Data (lifecycles without a hold) from the series' start, 40 windows before the burst.
    const [v] = judgeEngineWindows(windows, first, first, RULE);
    assert.ok(v?.ready && v.storm && v.baseline === 0, JSON.stringify(v));
  });

  it('a read that looked back a baseline before the range judges the range from its first window', () => {
    const from = first + T;
    const windows = Array.from({ length: 60 }, (_, k) => ({ t: first + k * STORM_WINDOW_MS, aborts: k === 45 ? 40 : 3 }));
    const verdicts = judgeEngineWindows(windows, first, from - T, RULE);
    assert.ok(verdicts.filter((v) => v.window.t >= from).every((v) => v.ready));
    assert.deepEqual(
      verdicts.filter((v) => v.storm).map((v) => v.window.t),
      [first + 45 * STORM_WINDOW_MS],
    );
  });
});

describe('one storm definition: the flag, the chart and the gauges judge the same windows alike', () => {
  const thresholds = flagThresholdsSchema.parse({});
  const fromMs = Date.UTC(2026, 11, 2, 8);
  const toMs = fromMs + 15 * 60_000;
  const capacity = 1000;

  /** kv_pinned's rows read over [fromMs, toMs] with a baseline's lookback, for an engine that started `startMs`. */
  function rowsOf(seed: number, engine: string, startMs: number): PinnedRow[] {
    const lookbackFrom = fromMs - stormLookbackMs({ trailingWindows: thresholds.stormTrailingWindows });
    const rows: PinnedRow[] = [];
    for (const w of sparseWindows(seed, firstStormWindow(startMs), (toMs - startMs) / STORM_WINDOW_MS)) {
      if (w.t < lookbackFrom) continue;
      rows.push({
        cluster: 'c',
        decode_engine: engine,
        window_start: new Date(w.t).toISOString().replace('T', ' ').replace('Z', ''),
        aborts: w.aborts,
        // Lookback rows carry aborts only, as kv_pinned returns them.
        peak_pinned_slots: w.t < fromMs ? 0 : Math.min(capacity, w.aborts * 40),
        capacity_slots: capacity,
        engine_since: new Date(Math.max(startMs, lookbackFrom)).toISOString().replace('T', ' ').replace('Z', ''),
      });
    }
    return rows;
  }

  it('agree window for window on a warm engine and on one that started inside the range', () => {
    const rows = [...rowsOf(11, 'warm', fromMs - 3_600_000), ...rowsOf(12, 'cold', fromMs + 200_000)];
    // The flag's judgement (queries/distribution.ts, capacityFlags).
    const flagStorms = new Set(
      ['warm', 'cold'].flatMap((e) =>
        judgePinnedRows(
          rows.filter((r) => r.decode_engine === e),
          fromMs,
          thresholds,
        )
          .filter((v) => v.storm)
          .map((v) => `${e}@${v.window.t}`),
      ),
    );
    // The chart's shading.
    const spec = kvPinnedSpec(rows as unknown as Record<string, unknown>[], {
      from: new Date(fromMs).toISOString(),
      to: new Date(toMs).toISOString(),
    }) as unknown as { data: { values: { engine: string; t: number; storm: boolean }[] } };
    const chartStorms = new Set(spec.data.values.filter((p) => p.storm).map((p) => `${p.engine.split(' ')[0]}@${p.t}`));
    // The gauges, refreshed once per completed window over the range: each storm window raises the storm gauge once.
    const gaugeStorms = new Set<string>();
    let previous: number | undefined;
    for (let now = fromMs + 5_000; now <= toMs; now += STORM_WINDOW_MS) {
      const cover = coveredWindows(now, previous, now - 15 * 60_000);
      previous = cover.toMs;
      if (cover.fromMs < fromMs) continue;
      // Each refresh reads its own [now - 15 min, now]: only the rows it would have.
      const read = rows.filter((r) => Date.parse(`${r.window_start.replace(' ', 'T')}Z`) < now);
      for (const g of kvGauges(read, fromMs, cover, thresholds)) if (g.abortStorm) gaugeStorms.add(`${g.decode_engine}@${cover.fromMs}`);
    }
    assert.ok(flagStorms.size >= 3, `storms to compare: ${[...flagStorms].join(', ')}`);
    assert.ok([...flagStorms].some((k) => k.startsWith('cold@')) && [...flagStorms].some((k) => k.startsWith('warm@')));
    assert.deepEqual([...chartStorms].sort(), [...flagStorms].sort());
    assert.deepEqual([...gaugeStorms].sort(), [...flagStorms].sort());
    // The cold engine's warm-up: no storm before its first (partial) window and a minute of whole ones.
    const coldReady = firstStormWindow(fromMs + 200_000) + (thresholds.stormWarmUpWindows + 1) * STORM_WINDOW_MS;
    assert.ok([...flagStorms].filter((k) => k.startsWith('cold@')).every((k) => Number(k.split('@')[1]) >= coldReady));
  });
});

describe('the gauges cover every window completed since the previous refresh', () => {
  it('a 15 s refresh skips no 10 s window; a refresh within a window repeats the latest; a failure is made up', () => {
    const base = Date.UTC(2026, 11, 3);
    const seen: number[] = [];
    let previous: number | undefined;
    for (let now = base + 12_000; now < base + 300_000; now += 15_000) {
      const cover = coveredWindows(now, previous, now - 900_000);
      for (let t = cover.fromMs; t < cover.toMs; t += STORM_WINDOW_MS) seen.push(t);
      previous = cover.toMs;
    }
    const expected = [];
    for (let t = base; t < firstStormWindow(base + 12_000 + 19 * 15_000); t += STORM_WINDOW_MS) expected.push(t);
    assert.deepEqual(seen, expected);
    assert.deepEqual(coveredWindows(base + 27_000, base + 20_000, base), { fromMs: base + 10_000, toMs: base + 20_000 });
    assert.deepEqual(coveredWindows(base + 65_000, base + 20_000, base), { fromMs: base + 20_000, toMs: base + 60_000 });
    // The clock went back: the latest complete window only.
    assert.deepEqual(coveredWindows(base + 5_000, base + 60_000, base - 900_000), { fromMs: base - 10_000, toMs: base });
  });
});

describe('the trailing-median gauge', () => {
  it("is the verdict's baseline: the median of the engine's own windows, none before its data began", () => {
    const thresholds = flagThresholdsSchema.parse({});
    const start = Date.UTC(2026, 11, 4, 9);
    const since = start + 3_000;
    // Ten aborts in every window from the engine's first one; the read reaches 15 minutes back, long before it.
    const rows: PinnedRow[] = Array.from({ length: 12 }, (_, k) => ({
      cluster: 'c',
      decode_engine: 'd',
      window_start: new Date(start + k * STORM_WINDOW_MS).toISOString(),
      aborts: 10,
      peak_pinned_slots: 10,
      capacity_slots: 1000,
      engine_since: new Date(since).toISOString(),
    }));
    const now = start + 12 * STORM_WINDOW_MS + 1_000;
    const [gauge] = kvGauges(rows, now - 15 * 60_000, coveredWindows(now, undefined, now - 15 * 60_000), thresholds);
    assert.equal(gauge?.baselineReady, true);
    assert.equal(gauge?.trailingMedian, 10, 'zeros before the engine existed would make it 0');
    assert.equal(gauge?.abortStorm, false);
  });
});
