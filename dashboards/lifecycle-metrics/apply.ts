// A refresh round's query results into the lifecycle gauges: each round replaces every value, so a label set that
// disappeared from the results disappears from /metrics.
import { wilsonLowerBound, type FlagReport, type FlagThresholds, type PinnedRow, type TailRow } from '../../queries/index.ts';
import type { LifecycleGauges } from './gauges.ts';
import { kvGauges, type CoveredWindows } from './kv.ts';

export interface ResolutionRow {
  cluster: string;
  decode_engine: string;
  holds: number;
  drained: number;
  timeouts: number;
  open: number;
}

export interface OpenRow {
  cluster: string;
  decode_engine: string;
  open: number;
  open_past_timeout: number;
}

/** What one refresh read: the gauges' range [readFromMs, t], the KV windows it covers, and the queries' rows. */
export interface RefreshRound {
  t: number;
  readFromMs: number;
  cover: CoveredWindows;
  mix: ResolutionRow[];
  tails: TailRow[];
  pinned: PinnedRow[];
  open: OpenRow[];
  flagList: FlagReport;
}

const num = (x: unknown) => {
  const n = Number(x);
  return Number.isFinite(n) ? n : 0;
};

interface EngineMix {
  cluster: string;
  decode_engine: string;
  drained: number;
  timeouts: number;
  open: number;
}

/** resolution_mix buckets by time: a window-wide bucket may still straddle two buckets, so sum per engine. */
function sumPerEngine(mix: ResolutionRow[]): EngineMix[] {
  const engines = new Map<string, EngineMix>();
  for (const row of mix) {
    const key = JSON.stringify([row.cluster, row.decode_engine]);
    const e = engines.get(key) ?? { cluster: row.cluster, decode_engine: row.decode_engine, drained: 0, timeouts: 0, open: 0 };
    e.drained += num(row.drained);
    e.timeouts += num(row.timeouts);
    e.open += num(row.open);
    engines.set(key, e);
  }
  return [...engines.values()];
}

function applyResolutions(g: LifecycleGauges, engines: EngineMix[]): void {
  for (const e of engines) {
    const labels = { cluster: e.cluster, decode_engine: e.decode_engine };
    g.resolutions.set({ ...labels, resolution: 'drained' }, e.drained);
    g.resolutions.set({ ...labels, resolution: 'timeout' }, e.timeouts);
    g.resolutions.set({ ...labels, resolution: 'open' }, e.open);
    const resolved = e.drained + e.timeouts;
    if (resolved === 0) continue;
    g.timeoutShare.set(labels, e.timeouts / resolved);
    // The bound the timeout_heavy flag compares with timeoutHeavyShare (queries/distribution.ts), on the same counts.
    g.timeoutShareLowerBound.set(labels, wilsonLowerBound(e.timeouts, resolved));
  }
}

function applyTails(g: LifecycleGauges, tails: TailRow[]): void {
  for (const row of tails) {
    const labels = { cluster: row.cluster, prefill_engine: row.prefill_engine, decode_engine: row.decode_engine, backend: row.backend };
    g.tailP99.set(labels, num(row.p99_ms) / 1000);
    g.tailTimeout.set(labels, num(row.timeout_ms) / 1000);
    g.tailHolds.set(labels, num(row.holds));
    g.tailOverTimeout.set(labels, num(row.over_timeout));
  }
}

function applyKv(g: LifecycleGauges, round: RefreshRound, t: FlagThresholds): void {
  for (const e of kvGauges(round.pinned, round.readFromMs, round.cover, t)) {
    const labels = { cluster: e.cluster, decode_engine: e.decode_engine };
    if (e.pinnedFraction !== undefined) g.pinnedFraction.set(labels, e.pinnedFraction);
    g.stormPinnedFraction.set(labels, e.stormPinnedFraction);
    g.abortStorm.set(labels, e.abortStorm ? 1 : 0);
    g.baselineReady.set(labels, e.baselineReady ? 1 : 0);
    g.windowAborts.set(labels, e.windowAborts);
    g.trailingAborts.set(labels, e.trailingMedian);
  }
}

export function applyRound(g: LifecycleGauges, round: RefreshRound, t: FlagThresholds): void {
  for (const gauge of Object.values(g)) gauge.reset();
  const engines = sumPerEngine(round.mix);
  applyResolutions(g, engines);
  applyTails(g, round.tails);
  applyKv(g, round, t);
  // Engines seen in the window read 0 open holds rather than vanishing.
  for (const e of engines) {
    g.openHolds.set({ cluster: e.cluster, decode_engine: e.decode_engine }, 0);
    g.openPastTimeout.set({ cluster: e.cluster, decode_engine: e.decode_engine }, 0);
  }
  for (const row of round.open) {
    const labels = { cluster: row.cluster, decode_engine: row.decode_engine };
    g.openHolds.set(labels, num(row.open));
    g.openPastTimeout.set(labels, num(row.open_past_timeout));
  }
  for (const total of round.flagList.totals)
    g.flags.set({ cluster: total.cluster, kind: total.kind, severity: total.severity }, total.count);
}
