/** An interval estimate of one quantity (a share, a rate, a quantile). Bounds may be infinite when the data do not reach. */
export interface Interval {
  estimate: number;
  lower: number;
  upper: number;
  /** Nominal coverage, e.g. 0.95. */
  confidence: number;
}

/** How a difference's interval was formed; the verdict's minimum detectable difference depends on it. */
export type DifferenceMethod = 'newcombe-hybrid-score' | 'mover-garwood' | 'mover-order-statistic' | 'welch-t';

/** An interval for candidate - baseline. */
export interface DifferenceInterval extends Interval {
  method: DifferenceMethod;
  /** Degrees of freedom of a t interval (Welch); absent for the normal-theory and exact methods. */
  df?: number;
}

export function checkConfidence(confidence: number): void {
  if (!(confidence > 0 && confidence < 1)) throw new RangeError(`confidence must be in (0, 1), got ${confidence}`);
}

/**
 * MOVER (Zou & Donner 2008): the interval for θ1 - θ2 recovered from separate intervals (l, u) for each, with the
 * variance of each estimate read off the side of its interval that points toward the other bound of the difference.
 * Unlike a Wald interval it keeps the asymmetry of each side's interval (skewed counts, quantiles).
 */
export function moverDifference(candidate: Interval, baseline: Interval): { lower: number; upper: number } {
  const d = candidate.estimate - baseline.estimate;
  const lower = d - Math.hypot(candidate.estimate - candidate.lower, baseline.upper - baseline.estimate);
  const upper = d + Math.hypot(candidate.upper - candidate.estimate, baseline.estimate - baseline.lower);
  return { lower, upper };
}
