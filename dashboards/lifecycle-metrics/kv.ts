// The KV gauges' values: what each refresh says about the 10 s windows completed since the previous one, judged by the
// one storm definition (queries/storms.ts) exactly as the kv_capacity_exhaustion flag judges them.
import {
  baselineReadyFrom,
  clickHouseTimeMs,
  firstStormWindow,
  judgePinnedRows,
  pinnedRowsByEngine,
  STORM_WINDOW_MS,
  stormLookbackMs,
  stormRuleOf,
  trailingMedianAborts,
  type FlagThresholds,
  type PinnedRow,
} from '../../queries/index.ts';

/** The 10 s windows a refresh covers: those starting in [fromMs, toMs). */
export interface CoveredWindows {
  fromMs: number;
  toMs: number;
}

/**
 * The windows completed since the previous successful refresh (`previousToMs`, its `toMs`), so that no window goes
 * unseen whatever the refresh interval: a 15 s refresh covers one window or two, one after a failure covers all those
 * missed (within the gauges' read, from `readFromMs`). With none completed since (a refresh within the same window),
 * or on the first refresh, or when the clock went back, the latest complete window.
 */
export function coveredWindows(nowMs: number, previousToMs: number | undefined, readFromMs: number): CoveredWindows {
  const toMs = firstStormWindow(nowMs);
  const latest = toMs - STORM_WINDOW_MS;
  if (previousToMs === undefined || previousToMs >= toMs) return { fromMs: latest, toMs };
  return { fromMs: Math.min(latest, Math.max(previousToMs, firstStormWindow(readFromMs))), toMs };
}

/** One decode engine's KV gauges. */
export interface KvEngineGauges {
  cluster: string;
  decode_engine: string;
  /** Peak pinned share over the covered windows (undefined: no capacity known). */
  pinnedFraction: number | undefined;
  /** Peak pinned share over the covered storm windows (0 when none). */
  stormPinnedFraction: number;
  abortStorm: boolean;
  /** The latest complete window is past the engine's warm-up. */
  baselineReady: boolean;
  /** Aborts in the latest complete window, and the trailing median before it (informational). */
  windowAborts: number;
  trailingMedian: number;
}

/**
 * The KV gauges of every engine in kv_pinned's rows, read over [readFromMs, now] with stormReadParams (so the rows
 * start a baseline before it).
 */
export function kvGauges(rows: readonly PinnedRow[], readFromMs: number, cover: CoveredWindows, t: FlagThresholds): KvEngineGauges[] {
  const rule = stormRuleOf(t);
  const seriesFirst = firstStormWindow(readFromMs - stormLookbackMs(rule));
  const latest = cover.toMs - STORM_WINDOW_MS;
  return pinnedRowsByEngine(rows).map((engineRows) => {
    const head = engineRows[0] as PinnedRow;
    const capacity = engineRows.reduce((max, r) => Math.max(max, Number(r.capacity_slots) || 0), 0);
    const share = (row: PinnedRow) => (Number(row.peak_pinned_slots) || 0) / capacity;
    let pinned = 0;
    let stormPinned = 0;
    let abortStorm = false;
    const verdicts = judgePinnedRows(engineRows, readFromMs, t);
    for (const { window: w, storm } of verdicts) {
      if (w.t < cover.fromMs || w.t >= cover.toMs || !(capacity > 0)) continue;
      pinned = Math.max(pinned, share(w.row));
      if (!storm) continue;
      abortStorm = true;
      stormPinned = Math.max(stormPinned, share(w.row));
    }
    const windows = engineRows.map((r) => ({ t: clickHouseTimeMs(r.window_start), aborts: Number(r.aborts) || 0 }));
    // The median the verdict uses: over the engine's own windows, none before its data began (queries/storms.ts).
    const readyFrom = baselineReadyFrom(clickHouseTimeMs(head.engine_since), seriesFirst, rule.warmUpWindows);
    const baselineFrom = Math.max(seriesFirst, readyFrom - rule.warmUpWindows * STORM_WINDOW_MS);
    return {
      cluster: head.cluster,
      decode_engine: head.decode_engine,
      pinnedFraction: capacity > 0 ? pinned : undefined,
      stormPinnedFraction: stormPinned,
      abortStorm,
      baselineReady: latest >= readyFrom,
      windowAborts: windows.find((w) => w.t === latest)?.aborts ?? 0,
      trailingMedian: trailingMedianAborts(windows, latest, baselineFrom, rule.trailingWindows),
    };
  });
}
