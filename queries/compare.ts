// `holdscope compare` and `/api/compare`: two arms of held records (queries/compare-selector.ts), each summarized by
// compare_arm.sql and the storm series of kv_pinned.sql, and per metric the difference candidate - baseline with a
// 95 % interval from the method that suits it (queries/analysis/) and a verdict.
//
// Every method assumes the holds of an arm are independent draws from a stationary process over its window, and the
// two arms disjoint: arms that share holds (overlapping windows with overlapping filters) make the intervals too wide
// or too narrow in ways no method here corrects.
import type { ClickHouseClient } from '../common/index.ts';
import { newcombeDifference, quantileDifference, RATE_PER_HOLDS, rateDifference, sortAscending } from './analysis/index.ts';
import { absent, judged, LOWER, type MetricComparison } from './compare-metric.ts';
import { compareRuns, comparesRuns, readRuns, type AcrossRuns, type HoldCounts } from './compare-runs.ts';
export type { MetricComparison, MetricName } from './compare-metric.ts';
import { describeSelector, type ArmName, type ArmSelector, type CompareRequest } from './compare-selector.ts';
import { judgePinnedRows, pinnedRowsByEngine, readStormSeries, type PinnedRow } from './distribution.ts';
import { flagThresholdsSchema, type FlagThresholds } from './flag-model.ts';
import type { ReadLimits } from './read-window.ts';
import { runQuery, type ReadOptions } from './runner.ts';

/** The confidence of every interval of a comparison. */
export const COMPARE_CONFIDENCE = 0.95;

/**
 * The most drain times and transfer tails read per arm (uniform samples, compare_arm.sql): the order-statistic
 * intervals stay valid on a uniform sample, only wider, and 20,000 values put p99's interval between about the 98.86th
 * and 99.14th percentiles, while an hour of a busy cluster's holds in full would be megabytes per arm.
 */
export const COMPARE_SAMPLE_SIZE = 20_000;

/** What one arm's held records say. */
export interface ArmSummary {
  holds: number;
  drained: number;
  timeouts: number;
  open: number;
  lateWrites: number;
  unsafeReleases: number;
  /** Holds with a transfer tail (at least one successful write). */
  tails: number;
  /** Drain times (hold_ms of drained holds) and transfer tails: uniform samples of at most COMPARE_SAMPLE_SIZE. */
  drainSample: number[];
  tailSample: number[];
  /** The largest share of a decode engine's KV capacity pinned in an abort storm window; null when no storm. */
  peakPinnedShare: number | null;
  /** Storm windows of the arm's decode engines in its window. */
  stormWindows: number;
}

export interface ArmReport {
  selector: ArmSelector;
  /** The selector as text, as notes name it. */
  description: string;
  summary: Omit<ArmSummary, 'drainSample' | 'tailSample'> & { drainSampled: number; tailSampled: number };
}

export interface ComparisonReport {
  baseline: ArmReport;
  candidate: ArmReport;
  confidence: number;
  /** Quantiles are computed on uniform samples of at most this many values per arm. */
  sampleSize: number;
  metrics: MetricComparison[];
  /** When both arms name an experiment arm (and no run): the arms compared across their runs, each run one value. */
  acrossRuns?: AcrossRuns;
}

type Arms = Record<ArmName, ArmSummary>;
type Names = Record<ArmName, string>;

/** The first arm (baseline first) that `lacks`, as a note naming its selector, or undefined. */
function lacking(arms: Arms, names: Names, lacks: (s: ArmSummary) => boolean, what: string): string | undefined {
  const arm = (['baseline', 'candidate'] as const).find((a) => lacks(arms[a]));
  return arm === undefined ? undefined : `no ${what} in ${arm} (${names[arm]})`;
}

function shareMetrics(arms: Arms, names: Names): MetricComparison[] {
  const { baseline: b, candidate: c } = arms;
  const timeout = { metric: 'timeout_share', label: 'timeout share (of resolved holds)', unit: 'share' } as const;
  const open = { metric: 'open_share', label: 'open holds share', unit: 'share' } as const;
  const noResolved = lacking(arms, names, (s) => s.drained + s.timeouts === 0, 'resolved holds');
  const noHolds = lacking(arms, names, (s) => s.holds === 0, 'holds');
  return [
    noResolved
      ? absent(timeout, LOWER, noHolds ?? noResolved)
      : judged(
          timeout,
          { baseline: b.timeouts / (b.drained + b.timeouts), candidate: c.timeouts / (c.drained + c.timeouts) },
          newcombeDifference(
            { successes: c.timeouts, trials: c.drained + c.timeouts },
            { successes: b.timeouts, trials: b.drained + b.timeouts },
          ),
          LOWER,
        ),
    noHolds
      ? absent(open, LOWER, noHolds)
      : judged(
          open,
          { baseline: b.open / b.holds, candidate: c.open / c.holds },
          newcombeDifference({ successes: c.open, trials: c.holds }, { successes: b.open, trials: b.holds }),
          LOWER,
        ),
  ];
}

function quantileMetrics(arms: Arms, names: Names, kind: 'drain' | 'tail'): MetricComparison[] {
  const sampleOf = (s: ArmSummary) => (kind === 'drain' ? s.drainSample : s.tailSample);
  const what = kind === 'drain' ? 'drained holds' : 'transfer tails';
  const note = lacking(arms, names, (s) => s.holds === 0, 'holds') ?? lacking(arms, names, (s) => sampleOf(s).length === 0, what);
  const sorted = { baseline: sortAscending(sampleOf(arms.baseline)), candidate: sortAscending(sampleOf(arms.candidate)) };
  return ([50, 90, 99] as const).map((p) => {
    const base = {
      metric: `${kind}_p${p}_ms`,
      label: `${kind === 'drain' ? 'drain time' : 'transfer tail'} p${p}`,
      unit: 'ms',
    } as const;
    if (note) return absent(base, LOWER, note);
    const diff = quantileDifference(sorted.candidate, sorted.baseline, p / 100, COMPARE_CONFIDENCE);
    const at = (values: Float64Array) => values[Math.floor(values.length * (p / 100))] as number;
    return judged(base, { baseline: at(sorted.baseline), candidate: at(sorted.candidate) }, diff, LOWER);
  });
}

function rateMetrics(arms: Arms, names: Names): MetricComparison[] {
  const noHolds = lacking(arms, names, (s) => s.holds === 0, 'holds');
  const { baseline: b, candidate: c } = arms;
  return (
    [
      ['late_writes_per_10k_holds', 'late writes per 10,000 holds', (s: ArmSummary) => s.lateWrites],
      ['unsafe_releases_per_10k_holds', 'unsafe releases per 10,000 holds', (s: ArmSummary) => s.unsafeReleases],
    ] as const
  ).map(([metric, label, events]) => {
    const base = { metric, label, unit: 'per 10,000 holds' } as const;
    if (noHolds) return absent(base, LOWER, noHolds);
    const rate = (s: ArmSummary) => (events(s) * RATE_PER_HOLDS) / s.holds;
    const diff = rateDifference({ events: events(c), exposure: c.holds }, { events: events(b), exposure: b.holds }, COMPARE_CONFIDENCE);
    return judged(base, { baseline: rate(b), candidate: rate(c) }, diff, LOWER);
  });
}

/** One peak per arm is one observation each: a difference, but no spread to build an interval from. */
function pinnedMetric(arms: Arms, names: Names): MetricComparison {
  const base = { metric: 'peak_pinned_share_in_storms', label: 'peak KV pinned share in storms', unit: 'share' } as const;
  const { baseline: b, candidate: c } = arms;
  const noStorm = lacking(arms, names, (s) => s.peakPinnedShare === null, 'abort storm');
  return {
    ...base,
    direction: LOWER,
    baseline: b.peakPinnedShare,
    candidate: c.peakPinnedShare,
    difference: b.peakPinnedShare === null || c.peakPinnedShare === null ? null : c.peakPinnedShare - b.peakPinnedShare,
    interval: null,
    method: null,
    verdict: null,
    note: noStorm ? `${noStorm}; no interval (one peak per arm)` : 'no interval (one peak per arm)',
  };
}

/** Every metric of two arms' summaries, candidate - baseline; `names` are the arms' selectors as text, for notes. */
export function compareSummaries(arms: Arms, names: Names): MetricComparison[] {
  const { baseline: b, candidate: c } = arms;
  const holds: MetricComparison = {
    metric: 'holds',
    label: 'holds',
    unit: 'holds',
    direction: null,
    baseline: b.holds,
    candidate: c.holds,
    difference: c.holds - b.holds,
    interval: null,
    method: null,
    verdict: null,
  };
  return [
    holds,
    ...shareMetrics(arms, names),
    ...quantileMetrics(arms, names, 'drain'),
    ...quantileMetrics(arms, names, 'tail'),
    ...rateMetrics(arms, names),
    pinnedMetric(arms, names),
  ];
}

/** A row of compare_arm.sql. */
interface ArmRow extends HoldCounts {
  tails: number;
  drain_sample: number[];
  tail_sample: number[];
  decode_engines: [string, string][];
}

/**
 * The peak share of capacity pinned in a storm window (the one storm rule, queries/storms.ts, through judgePinnedRows
 * as the kv_capacity_exhaustion flag reads it) over the decode engines the arm's holds ran on. An engine's pinned
 * slots are all its holds', whatever their versions: capacity is the engine's, so a selector narrower than an engine
 * (one prefill version of several) still sees the engine's storms whole.
 */
export function peakPinnedInStorms(
  rows: readonly PinnedRow[],
  engines: ReadonlySet<string>,
  fromMs: number,
  thresholds: FlagThresholds,
): { share: number | null; stormWindows: number } {
  let share: number | null = null;
  let stormWindows = 0;
  for (const engineRows of pinnedRowsByEngine(rows)) {
    const first = engineRows[0] as PinnedRow;
    if (!engines.has(JSON.stringify([first.cluster, first.decode_engine]))) continue;
    const capacity = engineRows.reduce((max, r) => Math.max(max, Number(r.capacity_slots)), 0);
    if (!(capacity > 0)) continue;
    for (const { window, storm } of judgePinnedRows(engineRows, fromMs, thresholds)) {
      if (!storm) continue;
      stormWindows++;
      share = Math.max(share ?? 0, Number(window.row.peak_pinned_slots) / capacity);
    }
  }
  return { share, stormWindows };
}

/** The window and cluster an arm's reads cover. */
const armWindow = (selector: ArmSelector) => ({ from: selector.from, to: selector.to, cluster: selector.filters.cluster ?? '' });

/** Arms over the same window and cluster ("decode-0 against decode-1 over the hour") share one storm series. */
function sameStormSeries(a: ArmSelector, b: ArmSelector): boolean {
  const x = armWindow(a);
  const y = armWindow(b);
  return x.from === y.from && x.to === y.to && x.cluster === y.cluster;
}

async function readArm(
  client: ClickHouseClient,
  database: string,
  selector: ArmSelector,
  pinnedRead: Promise<PinnedRow[]>,
  thresholds: FlagThresholds,
  read: ReadOptions,
): Promise<ArmSummary> {
  const [rows, pinned] = await Promise.all([
    runQuery<ArmRow>(
      client,
      database,
      'compare_arm',
      { ...armWindow(selector), ...selector.filters, sample_size: String(COMPARE_SAMPLE_SIZE) },
      read,
    ),
    pinnedRead,
  ]);
  const row = rows[0] as ArmRow;
  const engines = new Set(row.decode_engines.map(([cluster, engine]) => JSON.stringify([cluster, engine])));
  const peak = peakPinnedInStorms(pinned, engines, selector.fromMs, thresholds);
  return {
    holds: Number(row.holds),
    drained: Number(row.drained),
    timeouts: Number(row.timeouts),
    open: Number(row.open),
    lateWrites: Number(row.late_writes),
    unsafeReleases: Number(row.unsafe_releases),
    tails: Number(row.tails),
    drainSample: row.drain_sample.map(Number),
    tailSample: row.tail_sample.map(Number),
    peakPinnedShare: peak.share,
    stormWindows: peak.stormWindows,
  };
}

export interface CompareOptions {
  /** The storm rule's thresholds (flagThresholdsSchema's defaults when absent). */
  thresholds?: FlagThresholds;
  limits?: ReadLimits;
  signal?: AbortSignal;
}

function armReport(selector: ArmSelector, summary: ArmSummary): ArmReport {
  const { drainSample, tailSample, ...counts } = summary;
  return {
    selector,
    description: describeSelector(selector),
    summary: { ...counts, drainSampled: drainSample.length, tailSampled: tailSample.length },
  };
}

/** Both arms read at once (every query under the read limits), then compared metric by metric. */
export async function compareArms(
  client: ClickHouseClient,
  database: string,
  request: CompareRequest,
  options: CompareOptions = {},
): Promise<ComparisonReport> {
  const thresholds = options.thresholds ?? flagThresholdsSchema.parse({});
  // One query refused or failed fails the comparison: the others still waiting for a turn leave the queue then.
  const siblings = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, siblings.signal]) : siblings.signal;
  const read: ReadOptions = { limits: options.limits, signal };
  const withRuns = comparesRuns(request.baseline, request.candidate);
  const baselinePinned = readStormSeries(client, database, armWindow(request.baseline), thresholds, read);
  const candidatePinned = sameStormSeries(request.baseline, request.candidate)
    ? baselinePinned
    : readStormSeries(client, database, armWindow(request.candidate), thresholds, read);
  const [baseline, candidate, baselineRuns, candidateRuns] = await Promise.all([
    readArm(client, database, request.baseline, baselinePinned, thresholds, read),
    readArm(client, database, request.candidate, candidatePinned, thresholds, read),
    withRuns ? readRuns(client, database, request.baseline, read) : [],
    withRuns ? readRuns(client, database, request.candidate, read) : [],
  ]).catch((error: unknown) => {
    siblings.abort(error);
    throw error;
  });
  const names = { baseline: describeSelector(request.baseline), candidate: describeSelector(request.candidate) };
  const runs = { baseline: baselineRuns, candidate: candidateRuns };
  return {
    baseline: armReport(request.baseline, baseline),
    candidate: armReport(request.candidate, candidate),
    confidence: COMPARE_CONFIDENCE,
    sampleSize: COMPARE_SAMPLE_SIZE,
    metrics: compareSummaries({ baseline, candidate }, names),
    ...(withRuns ? { acrossRuns: { runs, metrics: compareRuns(runs) } satisfies AcrossRuns } : {}),
  };
}
