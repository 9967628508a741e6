// Quantiles of durations (drain time, transfer tails p50/p90/p99): distribution-free intervals from order
// statistics, and the difference of two quantiles by MOVER over those intervals.
//
// Why MOVER over order statistics rather than a bootstrap: it is deterministic with no seed, costs O(log n) CDF
// evaluations after sorting (no resampling cap needed however many holds an arm has), and stays valid at the high
// quantiles: a percentile bootstrap of p99 from a few hundred values resamples the same few top values and
// under-covers, while the order-statistic interval is exact (at least its confidence for any continuous
// distribution) and honest about the data not reaching: its bound is infinite when no order statistic is far enough.
// Measured coverage of the difference is in quantiles.test.ts.
import { binomialCdf } from './distributions.ts';
import { checkConfidence, moverDifference, type DifferenceInterval, type Interval } from './interval.ts';

/** A quantile's interval with the 1-based ranks of the order statistics used (0 or n + 1: no such statistic). */
export interface QuantileInterval extends Interval {
  n: number;
  lowerRank: number;
  upperRank: number;
}

/** A sorted copy, for the functions below that need ascending values. */
export const sortAscending = (values: ArrayLike<number>): Float64Array => Float64Array.from(values).sort();

export function checkSorted(values: ArrayLike<number>): void {
  for (let i = 1; i < values.length; i++) {
    if (!((values[i] as number) >= (values[i - 1] as number)))
      throw new RangeError('quantile intervals need values sorted ascending, without NaN');
  }
}

/** The smallest k in [0, n - 1] with binomialCdf(k) >= target, or n when there is none. */
function firstRankReaching(n: number, q: number, target: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (binomialCdf(mid, n, q) >= target) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

export interface QuantileIntervalOptions {
  /**
   * Interpolate each bound between the two order statistics whose binomial probabilities straddle α/2, weighted by
   * where α/2 falls between them. Off: the exact interval, whose coverage is at least the confidence and, for
   * high quantiles of a few hundred values, well above it (0.99 for p99 of 1,000). On: close to the nominal level,
   * which the difference wants (an over-wide interval inflates its minimum detectable difference).
   */
  interpolate?: boolean;
}

/**
 * Order-statistic interval for the q-quantile of sorted values: [X_(l), X_(u)] with l the largest and u the smallest
 * ranks such that P(Bin(n, q) <= l - 1) <= α/2 and P(Bin(n, q) <= u - 1) >= 1 - α/2, which covers with probability
 * at least the confidence. The estimate is X_(⌊nq⌋+1): the smallest value whose empirical CDF exceeds q.
 */
export function quantileInterval(
  sorted: ArrayLike<number>,
  q: number,
  confidence = 0.95,
  options: QuantileIntervalOptions = {},
): QuantileInterval {
  const n = sorted.length;
  if (n === 0) throw new RangeError('a quantile interval needs at least one value');
  if (!(q > 0 && q < 1)) throw new RangeError(`quantile level must be in (0, 1), got ${q}`);
  checkConfidence(confidence);
  checkSorted(sorted);
  const halfAlpha = (1 - confidence) / 2;
  // l - 1 is the last k with cdf(k) <= α/2, so l is the first k with cdf(k) > α/2 (ties at exactly α/2 are
  // measure-zero in practice).
  const lowerRank = firstRankReaching(n, q, halfAlpha + Number.EPSILON);
  const upperRank = firstRankReaching(n, q, 1 - halfAlpha) + 1;
  const at = (rank: number): number => sorted[Math.min(Math.max(rank, 1), n) - 1] as number;
  const cdf = (k: number): number => binomialCdf(k, n, q);
  let lower = lowerRank >= 1 ? at(lowerRank) : -Infinity;
  let upper = upperRank <= n ? at(upperRank) : Infinity;
  if (options.interpolate && lowerRank >= 1 && lowerRank < n) {
    const weight = (halfAlpha - cdf(lowerRank - 1)) / (cdf(lowerRank) - cdf(lowerRank - 1));
    lower += weight * (at(lowerRank + 1) - lower);
  }
  if (options.interpolate && upperRank > 1 && upperRank <= n) {
    const weight = (cdf(upperRank - 1) - (1 - halfAlpha)) / (cdf(upperRank - 1) - cdf(upperRank - 2));
    upper -= weight * (upper - at(upperRank - 1));
  }
  const estimate = at(Math.floor(n * q) + 1);
  return { estimate, lower, upper, confidence, n, lowerRank, upperRank: Math.min(upperRank, n + 1) };
}

/** Candidate q-quantile - baseline q-quantile (both sorted ascending), by MOVER over the order-statistic intervals. */
export function quantileDifference(
  candidateSorted: ArrayLike<number>,
  baselineSorted: ArrayLike<number>,
  q: number,
  confidence = 0.95,
): DifferenceInterval {
  const c = quantileInterval(candidateSorted, q, confidence, { interpolate: true });
  const b = quantileInterval(baselineSorted, q, confidence, { interpolate: true });
  return { estimate: c.estimate - b.estimate, ...moverDifference(c, b), confidence, method: 'mover-order-statistic' };
}
