// Rates per exposure (late writes or unsafe releases per 10,000 holds), where counts are small and often 0: the
// exact Garwood (1936) interval for one Poisson rate, and MOVER from the Garwood limits for a difference (Li, Tang &
// Wong 2014 show MOVER with exact limits keeps nominal coverage for Poisson rates, including zero counts).
import { gammaQuantile } from './distributions.ts';
import { checkConfidence, moverDifference, type DifferenceInterval, type Interval } from './interval.ts';

/** The report's unit: events per this many holds. */
export const RATE_PER_HOLDS = 10_000;

export interface PoissonCount {
  events: number;
  /** Exposure, e.g. holds. */
  exposure: number;
}

/** Exact (Garwood) interval for events / exposure, scaled to events per `per` units of exposure. */
export function garwoodRate({ events, exposure }: PoissonCount, confidence = 0.95, per = RATE_PER_HOLDS): Interval {
  if (!(Number.isInteger(events) && events >= 0 && exposure > 0)) {
    throw new RangeError(`a rate needs an integer count >= 0 and an exposure > 0; got ${events} / ${exposure}`);
  }
  checkConfidence(confidence);
  const alpha = 1 - confidence;
  // Poisson-mean limits are gamma quantiles (chi-square / 2): shape k for the lower, k + 1 for the upper; 0 at k = 0.
  const lower = events === 0 ? 0 : gammaQuantile(alpha / 2, events);
  const upper = gammaQuantile(1 - alpha / 2, events + 1);
  const scale = per / exposure;
  return { estimate: events * scale, lower: lower * scale, upper: upper * scale, confidence };
}

/** Candidate rate - baseline rate, per `per` units of exposure, by MOVER over the Garwood limits. */
export function rateDifference(
  candidate: PoissonCount,
  baseline: PoissonCount,
  confidence = 0.95,
  per = RATE_PER_HOLDS,
): DifferenceInterval {
  const c = garwoodRate(candidate, confidence, per);
  const b = garwoodRate(baseline, confidence, per);
  return { estimate: c.estimate - b.estimate, ...moverDifference(c, b), confidence, method: 'mover-garwood' };
}
