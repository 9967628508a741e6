// One metric of a comparison, as `holdscope compare` reports it: values, the difference with its interval, and the
// verdict. Shared by the comparison of two arms' holds (compare.ts) and of their runs (compare-runs.ts).
import { judge, type DifferenceInterval, type DifferenceMethod, type Direction } from './analysis/index.ts';

export type MetricName =
  | 'holds'
  | 'timeout_share'
  | 'open_share'
  | `drain_p${50 | 90 | 99}_ms`
  | `tail_p${50 | 90 | 99}_ms`
  | 'late_writes_per_10k_holds'
  | 'unsafe_releases_per_10k_holds'
  | 'peak_pinned_share_in_storms';

/** One metric of a comparison. Unbounded interval sides are Infinity (null in JSON): the data do not reach that far. */
export interface MetricComparison {
  metric: MetricName;
  label: string;
  unit: 'holds' | 'share' | 'ms' | 'per 10,000 holds';
  /** Null for the count of holds: more holds is neither better nor worse. */
  direction: Direction | null;
  baseline: number | null;
  candidate: number | null;
  /** candidate - baseline. */
  difference: number | null;
  interval: { lower: number; upper: number; confidence: number } | null;
  method: DifferenceMethod | null;
  verdict: 'better' | 'worse' | 'no detectable difference' | null;
  /** With "no detectable difference": the smallest difference (either sign) found with 80 % power. */
  minimumDetectableDifference?: number;
  /** Why a value, an interval or a verdict is absent. */
  note?: string;
}

export const LOWER: Direction = 'lower-is-better';

/** A metric from its interval, judged. */
export function judged(
  base: Pick<MetricComparison, 'metric' | 'label' | 'unit'>,
  values: { baseline: number; candidate: number },
  diff: DifferenceInterval,
  direction: Direction,
): MetricComparison {
  const judgement = judge(diff, direction);
  const unbounded = !Number.isFinite(diff.lower) || !Number.isFinite(diff.upper);
  return {
    ...base,
    direction,
    ...values,
    difference: diff.estimate,
    interval: { lower: diff.lower, upper: diff.upper, confidence: diff.confidence },
    method: diff.method,
    verdict: judgement.verdict,
    ...(judgement.verdict === 'no detectable difference' ? { minimumDetectableDifference: judgement.minimumDetectableDifference } : {}),
    ...(unbounded ? { note: 'too few values for this quantile in an arm: the interval is unbounded where the data do not reach' } : {}),
  };
}

export const absent = (
  base: Pick<MetricComparison, 'metric' | 'label' | 'unit'>,
  direction: Direction,
  note: string,
): MetricComparison => ({
  ...base,
  direction,
  baseline: null,
  candidate: null,
  difference: null,
  interval: null,
  method: null,
  verdict: null,
  note,
});
