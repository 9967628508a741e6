// Abort storms as the kv_capacity_exhaustion detection defines them, in one place for the detection
// (queries/distribution.ts), the KV chart's shading (dashboards/charts/specs.ts) and the storm gauges
// (dashboards/metrics.ts). The work follows the windows kv_pinned returned, never the range's length: a range of
// years holds no more windows than have rows.

/** kv_pinned's window. */
export const STORM_WINDOW_MS = 10_000;

/** What makes a 10 s window a storm (flagThresholdsSchema: stormMultiplier, stormTrailingWindows, stormMinAborts). */
export interface StormRule {
  multiplier: number;
  trailingWindows: number;
  minAborts: number;
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
 * Each window of one engine (in time order) with its trailing median and whether it is a storm window: at least
 * `minAborts` aborts and at least `multiplier` times the median of the windows before it. Linear in the windows given:
 * the trailing windows' aborts are kept sorted as the series moves on, so no window is looked at twice and nothing is
 * allocated per window but its answer.
 */
export function stormWindows<W extends AbortWindow>(
  windows: readonly W[],
  firstMs: number,
  rule: StormRule,
): { window: W; baseline: number; storm: boolean }[] {
  const out: { window: W; baseline: number; storm: boolean }[] = [];
  const trailing: number[] = [];
  let start = 0;
  for (let i = 0; i < windows.length; i++) {
    const window = windows[i] as W;
    const from = Math.max(firstMs, window.t - rule.trailingWindows * STORM_WINDOW_MS);
    for (; start < i && (windows[start] as W).t < from; start++) trailing.splice(lowerBound(trailing, (windows[start] as W).aborts), 1);
    const baseline = medianWithZeros(trailing, Math.round((window.t - from) / STORM_WINDOW_MS));
    out.push({ window, baseline, storm: window.aborts >= rule.minAborts && window.aborts >= rule.multiplier * baseline });
    trailing.splice(lowerBound(trailing, window.aborts), 0, window.aborts);
  }
  return out;
}
