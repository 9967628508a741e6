// The verdict on one metric from the interval of candidate - baseline.
import { normalQuantile, studentTQuantile } from './distributions.ts';
import type { DifferenceInterval } from './interval.ts';

export type Direction = 'lower-is-better' | 'higher-is-better';

export type Judgement =
  | { verdict: 'better' | 'worse' }
  | {
      verdict: 'no detectable difference';
      /**
       * The smallest true difference (in the metric's unit, either sign) that data this noisy would have found in
       * `power` of repetitions: (z_{1-α/2} + z_power) × SE. Infinity when a side of the interval is unbounded.
       */
      minimumDetectableDifference: number;
    };

export interface JudgeOptions {
  /** Power at which the minimum detectable difference is stated; 0.8 by convention. */
  power?: number;
}

/**
 * Better or worse only when the interval excludes 0 (the interval's own confidence is the test's level).
 *
 * The minimum detectable difference needs a standard error; the intervals are not all Wald intervals, so it is read
 * off the width: SE ≈ (upper - lower) / (2 × critical value), with the critical value of the method (t with the
 * interval's df for Welch, z otherwise). For the score, exact and order-statistic intervals this is the SE of a
 * symmetric interval of the same width, an approximation that is close when the counts are not tiny and that
 * overstates the MDD on the side where a skewed interval is narrow.
 */
export function judge(diff: DifferenceInterval, direction: Direction, options: JudgeOptions = {}): Judgement {
  const power = options.power ?? 0.8;
  const excludesZeroAbove = diff.lower > 0;
  const excludesZeroBelow = diff.upper < 0;
  if (excludesZeroAbove || excludesZeroBelow) {
    const candidateHigher = excludesZeroAbove;
    return { verdict: candidateHigher === (direction === 'higher-is-better') ? 'better' : 'worse' };
  }
  const halfAlpha = (1 - diff.confidence) / 2;
  const quantile = (p: number): number => (diff.df !== undefined ? studentTQuantile(p, diff.df) : normalQuantile(p));
  const critical = quantile(1 - halfAlpha);
  const se = (diff.upper - diff.lower) / (2 * critical);
  const mdd = Number.isFinite(se) ? (critical + quantile(power)) * se : Infinity;
  return { verdict: 'no detectable difference', minimumDetectableDifference: mdd };
}
