import type { ClickHouseClient } from '../common/index.ts';
import type { Flag, FlagThresholds, FlagWindow } from './flag-model.ts';
import { wilsonInterval } from './analysis/index.ts';
import { runQuery, type ReadOptions } from './runner.ts';
import { firstStormWindow, judgeEngineWindows, stormLookbackMs, type StormRule, type StormVerdict } from './storms.ts';

/** Lower bound of the 95 % Wilson score interval: a share that is high with confidence, not by a handful of samples. */
export function wilsonLowerBound(successes: number, n: number): number {
  return n === 0 ? 0 : wilsonInterval({ successes, trials: n }).lower;
}

/** A row of hold_resolution_groups.sql. */
export interface GroupRow {
  scope_kind: 'decode_engine' | 'backend' | 'version_pair' | 'pairing';
  cluster: string;
  decode_engine: string;
  backend: string;
  prefill_version: string;
  decode_version: string;
  holds: number;
  drained: number;
  timeouts: number;
  open: number;
}

/** A row of transfer_tails.sql (decode_engine is '' unless it was asked for by pairing, by_decode_engine = 1). */
export interface TailRow {
  cluster: string;
  prefill_engine: string;
  decode_engine: string;
  backend: string;
  holds: number;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
  max_ms: number;
  timeout_ms: number;
  over_timeout: number;
}

/** A row of kv_pinned.sql. */
export interface PinnedRow {
  cluster: string;
  decode_engine: string;
  window_start: string;
  aborts: number;
  peak_pinned_slots: number;
  capacity_slots: number;
  /** The earliest data of the decode engine in the read: the start of its storm warm-up (null: none). */
  engine_since: string | null;
}

/** The storm rule of the thresholds (queries/storms.ts). */
export const stormRuleOf = (t: FlagThresholds): StormRule => ({
  multiplier: t.stormMultiplier,
  trailingWindows: t.stormTrailingWindows,
  minAborts: t.stormMinAborts,
  warmUpWindows: Math.min(t.stormWarmUpWindows, t.stormTrailingWindows),
});

/** kv_pinned's parameters for a range whose storms are judged: the aborts of the baseline before it too. */
export const stormReadParams = (t: FlagThresholds) => ({ baseline_lookback_seconds: String(stormLookbackMs(stormRuleOf(t)) / 1000) });

/**
 * The storm series of a window, as every storm verdict reads it: kv_pinned's windows with aborts only (the rest change
 * no storm, and over a week of holds left open they are 60,480 rows an engine), with the baseline's lookback.
 */
export function readStormSeries(
  client: ClickHouseClient,
  database: string,
  window: { from: string; to: string; cluster: string },
  thresholds: FlagThresholds,
  read: ReadOptions = {},
): Promise<PinnedRow[]> {
  return runQuery<PinnedRow>(client, database, 'kv_pinned', { ...window, with_aborts_only: '1', ...stormReadParams(thresholds) }, read);
}

/** kv_pinned's rows per decode engine (cluster and engine), in the rows' order (time order within an engine). */
export function pinnedRowsByEngine<R extends { cluster: string; decode_engine: string }>(rows: readonly R[]): R[][] {
  const byEngine = new Map<string, R[]>();
  for (const row of rows) {
    const key = JSON.stringify([row.cluster, row.decode_engine]);
    const list = byEngine.get(key);
    if (list) list.push(row);
    else byEngine.set(key, [row]);
  }
  return [...byEngine.values()];
}

/** Epoch ms of a ClickHouse time, NaN for null or an unparsable one. */
export function clickHouseTimeMs(v: unknown): number {
  if (v === null || v === undefined || v === '') return NaN;
  const s = String(v);
  return Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(s) ? s : `${s.replace(' ', 'T')}Z`);
}

/**
 * One engine's kv_pinned rows judged by the one storm definition (queries/storms.ts): the windows of a range starting
 * at `fromMs` (from its first 10 s window), those before it read with stormReadParams only for their baseline.
 */
export function judgePinnedRows(rows: readonly PinnedRow[], fromMs: number, t: FlagThresholds): StormVerdict<PinnedWindow>[] {
  const rule = stormRuleOf(t);
  const windows = rows.map((row) => ({ row, t: clickHouseTimeMs(row.window_start), aborts: Number(row.aborts) }));
  const first = firstStormWindow(fromMs);
  const verdicts = judgeEngineWindows(windows, clickHouseTimeMs(rows[0]?.engine_since), fromMs - stormLookbackMs(rule), rule);
  return verdicts.filter((v) => v.window.t >= first);
}

/** A kv_pinned row as a storm window. */
export interface PinnedWindow {
  row: PinnedRow;
  t: number;
  aborts: number;
}

const round = (x: number, digits = 4) => Number(x.toFixed(digits));

function scopeOf(row: GroupRow): Record<string, string> {
  switch (row.scope_kind) {
    case 'decode_engine':
      return { cluster: row.cluster, decode_engine: row.decode_engine };
    case 'backend':
      return { cluster: row.cluster, backend: row.backend };
    case 'version_pair':
      return { cluster: row.cluster, prefill_version: row.prefill_version, decode_version: row.decode_version };
    case 'pairing':
      return { cluster: row.cluster, prefill_version: row.prefill_version, decode_version: row.decode_version, backend: row.backend };
  }
}

const scopeText = (scope: Record<string, string>) =>
  Object.entries(scope)
    .filter(([k]) => k !== 'cluster')
    .map(([k, v]) => `${k.replace('_', ' ')} ${v || '(unknown)'}`)
    .join(', ');

function resolutionFlags(rows: GroupRow[], t: FlagThresholds): Flag[] {
  const flags: Flag[] = [];
  for (const row of rows) {
    const resolved = row.drained + row.timeouts;
    const scope = scopeOf(row);
    if (row.scope_kind !== 'pairing') {
      const lower = wilsonLowerBound(row.timeouts, resolved);
      if (resolved >= t.timeoutHeavyMinHolds && lower > t.timeoutHeavyShare) {
        flags.push({
          kind: 'timeout_heavy',
          severity: 'warning',
          cluster: row.cluster,
          scope: { ...scope, scope: row.scope_kind },
          value: round(row.timeouts / resolved),
          threshold: t.timeoutHeavyShare,
          sample_size: resolved,
          summary: `${round((100 * row.timeouts) / resolved, 1)}% of ${resolved} holds on ${scopeText(scope)} resolved by timeout (95% lower bound ${round(100 * lower, 1)}% > ${100 * t.timeoutHeavyShare}%): acks are not arriving or transfer tails outlast the drain; check ack delivery and the backend's ack protocol.`,
          evidence: {
            holds: resolved,
            timeouts: row.timeouts,
            drained: row.drained,
            open: row.open,
            timeout_share: round(row.timeouts / resolved),
            wilson_lower_bound: round(lower),
          },
        });
      }
    } else if (resolved >= t.pairingMinHolds && row.timeouts / resolved >= t.pairingTimeoutShare) {
      flags.push({
        kind: 'pairing_incompatible',
        severity: 'warning',
        cluster: row.cluster,
        scope,
        value: round(row.timeouts / resolved),
        threshold: t.pairingTimeoutShare,
        sample_size: resolved,
        summary: `Holds between prefill ${row.prefill_version || '(unknown)'} and decode ${row.decode_version || '(unknown)'} over ${row.backend || '(unknown)'} essentially never drain (${row.timeouts} of ${resolved} timed out): this pairing or backend lacks the ack protocol; upgrade it or stop routing across it.`,
        evidence: { holds: resolved, timeouts: row.timeouts, drained: row.drained },
      });
    }
  }
  return flags;
}

function tailFlags(rows: TailRow[], t: FlagThresholds): Flag[] {
  const flags: Flag[] = [];
  for (const row of rows) {
    if (row.holds < t.longTailMinHolds || row.timeout_ms <= 0 || row.p99_ms < t.longTailFractionOfTimeout * row.timeout_ms) continue;
    const critical = row.over_timeout > 0;
    flags.push({
      kind: 'long_transfer_tail',
      severity: critical ? 'critical' : 'warning',
      cluster: row.cluster,
      scope: { cluster: row.cluster, prefill_engine: row.prefill_engine, decode_engine: row.decode_engine, backend: row.backend },
      value: round(row.p99_ms, 3),
      threshold: round(t.longTailFractionOfTimeout * row.timeout_ms, 3),
      sample_size: row.holds,
      summary:
        `p99 transfer tail of prefill ${row.prefill_engine} to decode ${row.decode_engine} over ${row.backend} is ${Math.round(row.p99_ms)} ms against a ${row.timeout_ms} ms hold timeout` +
        (critical
          ? `, and ${row.over_timeout} write(s) completed after the timeout: releases on timeout are racing live writes; bound transfer batches or lengthen the hold.`
          : ': timeouts are close to releasing pages under live writes; bound transfer batches or lengthen the hold.'),
      evidence: {
        holds: row.holds,
        p50_ms: row.p50_ms,
        p90_ms: row.p90_ms,
        p99_ms: row.p99_ms,
        max_ms: row.max_ms,
        timeout_ms: row.timeout_ms,
        over_timeout: row.over_timeout,
      },
    });
  }
  return flags;
}

/** Storm windows (aborts at least N× the trailing median, past the engine's warm-up) in which holds pin a share of capacity. */
function capacityFlags(rows: PinnedRow[], window: FlagWindow, t: FlagThresholds): Flag[] {
  const flags: Flag[] = [];
  const fromMs = Date.parse(window.from);
  for (const engineRows of pinnedRowsByEngine(rows)) {
    const capacity = engineRows.reduce((max, r) => Math.max(max, r.capacity_slots), 0);
    if (!(capacity > 0)) continue;
    let worst: { row: PinnedRow; base: number } | undefined;
    let stormWindowCount = 0;
    for (const { window: w, baseline, storm } of judgePinnedRows(engineRows, fromMs, t)) {
      if (!storm || w.row.peak_pinned_slots < t.pinnedCapacityShare * capacity) continue;
      stormWindowCount++;
      if (!worst || w.row.peak_pinned_slots > worst.row.peak_pinned_slots) worst = { row: w.row, base: baseline };
    }
    if (!worst) continue;
    flags.push(capacityFlag(worst.row, worst.base, capacity, stormWindowCount, t));
  }
  return flags;
}

function capacityFlag(row: PinnedRow, base: number, capacity: number, stormWindowCount: number, t: FlagThresholds): Flag {
  return {
    kind: 'kv_capacity_exhaustion',
    severity: 'critical',
    cluster: row.cluster,
    scope: { cluster: row.cluster, decode_engine: row.decode_engine },
    value: round(row.peak_pinned_slots / capacity),
    threshold: t.pinnedCapacityShare,
    sample_size: row.aborts,
    summary: `During an abort storm on decode ${row.decode_engine} (${row.aborts} aborts in 10 s from ${row.window_start}, ${base} is usual), holds pinned ${Math.round((100 * row.peak_pinned_slots) / capacity)}% of its KV capacity: new requests queue behind held pages; shorten hold timeouts or fix ack delivery.`,
    evidence: {
      window_start: row.window_start,
      aborts: row.aborts,
      trailing_median_aborts: base,
      peak_pinned_slots: row.peak_pinned_slots,
      capacity_slots: capacity,
      storm_windows_over_threshold: stormWindowCount,
    },
  };
}

/** The distribution kinds: timeout_heavy, pairing_incompatible, long_transfer_tail, kv_capacity_exhaustion. */
export async function distributionFlags(
  client: ClickHouseClient,
  database: string,
  window: FlagWindow,
  thresholds: FlagThresholds,
  read: ReadOptions = {},
): Promise<Flag[]> {
  const params = { from: window.from, to: window.to, cluster: window.cluster ?? '' };
  const [groups, tails, pinned] = await Promise.all([
    runQuery<GroupRow>(client, database, 'hold_resolution_groups', params, read),
    // Per pairing: each against its own decode engine's hold timeout.
    runQuery<TailRow>(client, database, 'transfer_tails', { ...params, by_decode_engine: '1' }, read),
    readStormSeries(client, database, params, thresholds, read),
  ]);
  return [...resolutionFlags(groups, thresholds), ...tailFlags(tails, thresholds), ...capacityFlags(pinned, window, thresholds)];
}
