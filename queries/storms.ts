// Abort storms as the kv_capacity_exhaustion detection defines them, in one place for the detection
// (queries/distribution.ts), the KV chart's shading (dashboards/charts/specs.ts) and the storm gauges
// (dashboards/lifecycle-metrics/kv.ts). The work follows the windows kv_pinned returned, never the range's length: a
// range of years holds no more windows than have rows.
//
// Warm-up: a window gets a verdict only once its decode engine has a baseline of its own: `warmUpWindows` whole
// windows of data (any lifecycle, aborted or not: kv_pinned's engine_since) after the window its data began in, which
// is partial and left out. The baseline is the median over the engine's windows since then, up to `trailingWindows`.
// Without this the windows before an engine existed counted as zeros, a median of 0, and any `minAborts` aborts were a
// storm: every cold start (a new engine, holdscope just deployed) paged. The reads look back `trailingWindows` windows
// before the range (kv_pinned's baseline_lookback_seconds), so an engine running before the range has its verdicts
// from the range's first window; an engine that ran without aborts has data (its lifecycles) and is past its warm-up,
// so its first burst of aborts is judged.

/** kv_pinned's window. */
export const STORM_WINDOW_MS = 10_000;

/**
 * What makes a 10 s window a storm (flagThresholdsSchema: stormMultiplier, stormTrailingWindows, stormMinAborts,
 * stormWarmUpWindows).
 */
export interface StormRule {
  multiplier: number;
  trailingWindows: number;
  minAborts: number;
  warmUpWindows: number;
}

/** A window of one decode engine: its start (epoch ms) and its aborts. */
export interface AbortWindow {
  t: number;
  aborts: number;
}

/** The median of `sorted` (ascending) and as many zeros again as make `count` numbers (windows without a row had no aborts). */
function medianWithZeros(sorted: readonly number[], count: number): number {
  if (count <= 0) return 0;
  const zeros = Math.max(0, count - sorted.length);
  const at = (i: number) => (i < zeros ? 0 : (sorted[i - zeros] as number));
  const mid = Math.floor(count / 2);
  return count % 2 === 1 ? at(mid) : (at(mid - 1) + at(mid)) / 2;
}

/** Where `value` goes in the ascending `sorted`: the first index whose element is not below it. */
function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Where the series of windows starts: the window holding `fromMs`. */
export const firstStormWindow = (fromMs: number) => Math.floor(fromMs / STORM_WINDOW_MS) * STORM_WINDOW_MS;

/**
 * The trailing median of aborts before window `t`: over the `trailingWindows` windows before it, or as many as lie
 * between `firstMs` (the series' first window) and it. `windows` are one engine's, in time order.
 */
export function trailingMedianAborts(windows: readonly AbortWindow[], t: number, firstMs: number, trailingWindows: number): number {
  const from = Math.max(firstMs, t - trailingWindows * STORM_WINDOW_MS);
  const values = windows.filter((w) => w.t >= from && w.t < t).map((w) => w.aborts);
  return medianWithZeros(
    values.sort((a, b) => a - b),
    Math.round((t - from) / STORM_WINDOW_MS),
  );
}

/**
 * The first window of an engine with a verdict: `warmUpWindows` whole windows after the (partial) window of its earliest
 * data (`engineSinceMs`), or of the series' first window (`firstMs`) when the data read starts there.
 */
export function baselineReadyFrom(engineSinceMs: number, firstMs: number, warmUpWindows: number): number {
  const since = Number.isFinite(engineSinceMs) ? Math.max(engineSinceMs, firstMs) : firstMs;
  return firstStormWindow(since) + (warmUpWindows + 1) * STORM_WINDOW_MS;
}

/** One window's verdict: its trailing median, whether the warm-up is over (`ready`), and whether it is a storm window. */
export interface StormVerdict<W extends AbortWindow> {
  window: W;
  baseline: number;
  ready: boolean;
  storm: boolean;
}

/**
 * Each window of one engine (in time order) with its trailing median and whether it is a storm window: past the
 * engine's warm-up (at or after `readyFromMs`, from baselineReadyFrom), at least `minAborts` aborts and at least
 * `multiplier` times the median of the windows before it. Linear in the windows given: the trailing windows' aborts
 * are kept sorted as the series moves on, so no window is looked at twice and nothing is allocated per window but its
 * answer.
 */
export function stormWindows<W extends AbortWindow>(
  windows: readonly W[],
  firstMs: number,
  rule: StormRule,
  readyFromMs: number,
): StormVerdict<W>[] {
  const out: StormVerdict<W>[] = [];
  // The engine's baseline starts with its first whole window: before it the engine did not exist, not had no aborts.
  const baselineFrom = readyFromMs - rule.warmUpWindows * STORM_WINDOW_MS;
  const trailing: number[] = [];
  let start = 0;
  for (let i = 0; i < windows.length; i++) {
    const window = windows[i] as W;
    const from = Math.max(firstMs, baselineFrom, window.t - rule.trailingWindows * STORM_WINDOW_MS);
    for (; start < i && (windows[start] as W).t < from; start++) trailing.splice(lowerBound(trailing, (windows[start] as W).aborts), 1);
    const baseline = medianWithZeros(trailing, Math.round((window.t - from) / STORM_WINDOW_MS));
    const ready = window.t >= readyFromMs;
    out.push({ window, baseline, ready, storm: ready && window.aborts >= rule.minAborts && window.aborts >= rule.multiplier * baseline });
    trailing.splice(lowerBound(trailing, window.aborts), 0, window.aborts);
  }
  return out;
}

/** How far before a range kv_pinned reads aborts (its baseline_lookback_seconds), so the range's first windows have their baseline. */
export const stormLookbackMs = (rule: Pick<StormRule, 'trailingWindows'>) => rule.trailingWindows * STORM_WINDOW_MS;

/**
 * One engine's kv_pinned windows (time order) judged, its warm-up from its earliest data (kv_pinned's engine_since;
 * NaN when unknown: the series' first window). `seriesFromMs` is where the aborts were read from: the range's start
 * less kv_pinned's baseline_lookback_seconds.
 */
export function judgeEngineWindows<W extends AbortWindow>(
  windows: readonly W[],
  engineSinceMs: number,
  seriesFromMs: number,
  rule: StormRule,
): StormVerdict<W>[] {
  const first = firstStormWindow(seriesFromMs);
  return stormWindows(windows, first, rule, baselineReadyFrom(engineSinceMs, first, rule.warmUpWindows));
}
