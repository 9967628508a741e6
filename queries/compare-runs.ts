// Arms compared across their runs: when engines label an experiment's arm and run (pd.experiment.arm and .run), each
// run of an arm is one observation of each metric, and the difference of the arms' means gets Welch's interval with
// the runs' own spread. This is the design of the report behind holdscope (7 runs per arm): it holds when the runs
// differ more than their holds suggest (a warm cache, a noisy neighbour, a different hour), where the pooled intervals
// of compare.ts, which count every hold as independent, would be too narrow.
import type { ClickHouseClient } from '../common/index.ts';
import { RATE_PER_HOLDS, welchDifference } from './analysis/index.ts';
import { absent, judged, LOWER, type MetricComparison, type MetricName } from './compare-metric.ts';
import type { ArmName, ArmSelector } from './compare-selector.ts';
import { runQuery, type ReadOptions } from './runner.ts';

/** The counts compare_arm.sql and compare_runs.sql read alike, of an arm's or a run's holds. */
export interface HoldCounts {
  holds: number;
  drained: number;
  timeouts: number;
  open: number;
  late_writes: number;
  unsafe_releases: number;
}

/** A row of compare_runs.sql: one run of an experiment arm. */
export interface RunRow extends HoldCounts {
  run: string;
  drain_p50_ms: number | null;
  drain_p90_ms: number | null;
  tail_p50_ms: number | null;
  tail_p90_ms: number | null;
}

export interface AcrossRuns {
  /** Each arm's runs, as read. */
  runs: Record<ArmName, RunRow[]>;
  metrics: MetricComparison[];
}

/** Each run's value of a metric, or null when the run has none (no resolved hold, no tail). */
const RUN_METRICS: readonly [MetricName, string, MetricComparison['unit'], (r: RunRow) => number | null][] = [
  [
    'timeout_share',
    'timeout share (of resolved holds)',
    'share',
    (r) => (r.drained + r.timeouts > 0 ? r.timeouts / (r.drained + r.timeouts) : null),
  ],
  [
    'late_writes_per_10k_holds',
    'late writes per 10,000 holds',
    'per 10,000 holds',
    (r) => (r.holds > 0 ? (r.late_writes * RATE_PER_HOLDS) / r.holds : null),
  ],
  [
    'unsafe_releases_per_10k_holds',
    'unsafe releases per 10,000 holds',
    'per 10,000 holds',
    (r) => (r.holds > 0 ? (r.unsafe_releases * RATE_PER_HOLDS) / r.holds : null),
  ],
  ['drain_p50_ms', 'drain time p50', 'ms', (r) => r.drain_p50_ms],
  ['drain_p90_ms', 'drain time p90', 'ms', (r) => r.drain_p90_ms],
  ['tail_p50_ms', 'transfer tail p50', 'ms', (r) => r.tail_p50_ms],
  ['tail_p90_ms', 'transfer tail p90', 'ms', (r) => r.tail_p90_ms],
];

const mean = (values: readonly number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

/** Every per-run metric, candidate - baseline, by Welch's interval over the runs' values. */
export function compareRuns(runs: Record<ArmName, RunRow[]>): MetricComparison[] {
  return RUN_METRICS.map(([metric, label, unit, valueOf]) => {
    const base = { metric, label: `${label}, mean of runs`, unit };
    const values = (arm: ArmName) => runs[arm].map(valueOf).flatMap((v) => (v === null || !Number.isFinite(Number(v)) ? [] : [Number(v)]));
    const baseline = values('baseline');
    const candidate = values('candidate');
    const short = (['baseline', 'candidate'] as const).find((arm) => values(arm).length < 2);
    if (short !== undefined) return absent(base, LOWER, `fewer than 2 runs with a value in ${short}: no spread across runs to judge by`);
    return judged(base, { baseline: mean(baseline), candidate: mean(candidate) }, welchDifference(candidate, baseline), LOWER);
  });
}

/** Runs are compared when both arms name an experiment arm and neither names one run. */
export function comparesRuns(baseline: ArmSelector, candidate: ArmSelector): boolean {
  return [baseline, candidate].every((s) => s.filters.arm !== undefined && s.filters.run === undefined);
}

/** One arm's runs (compare_runs.sql), under the read limits like every read. */
export async function readRuns(client: ClickHouseClient, database: string, selector: ArmSelector, read: ReadOptions): Promise<RunRow[]> {
  const { run: _run, ...filters } = selector.filters;
  const rows = await runQuery<RunRow>(client, database, 'compare_runs', { from: selector.from, to: selector.to, ...filters }, read);
  return rows.map((r) => ({
    ...r,
    holds: Number(r.holds),
    drained: Number(r.drained),
    timeouts: Number(r.timeouts),
    open: Number(r.open),
    late_writes: Number(r.late_writes),
    unsafe_releases: Number(r.unsafe_releases),
  }));
}
