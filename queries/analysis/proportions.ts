// Intervals for shares (e.g. timeout share = timeouts / holds): Wilson for one share, Newcombe's hybrid score
// interval (Newcombe 1998, method 10) for a difference. Both keep good coverage at shares near 0 and small counts,
// where the Wald interval collapses to zero width.
import { normalQuantile } from './distributions.ts';
import { checkConfidence, moverDifference, type DifferenceInterval, type Interval } from './interval.ts';

export interface Proportion {
  successes: number;
  trials: number;
}

function checkProportion({ successes, trials }: Proportion): void {
  if (!(Number.isInteger(successes) && Number.isInteger(trials) && successes >= 0 && successes <= trials && trials > 0)) {
    throw new RangeError(`a proportion needs integers 0 <= successes <= trials, trials > 0; got ${successes}/${trials}`);
  }
}

/** Wilson score interval for one share. */
export function wilsonInterval(x: Proportion, confidence = 0.95): Interval {
  checkProportion(x);
  checkConfidence(confidence);
  const { successes, trials: n } = x;
  const z = normalQuantile(1 - (1 - confidence) / 2);
  const p = successes / n;
  const z2 = z * z;
  const centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const half = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / (1 + z2 / n);
  // At 0 or n successes the formula gives the bound up to rounding (-4e-19): a share stays within [0, 1].
  return { estimate: p, lower: successes === 0 ? 0 : centre - half, upper: successes === n ? 1 : centre + half, confidence };
}

/** Newcombe's hybrid score interval (method 10) for candidate share - baseline share: MOVER over Wilson intervals. */
export function newcombeDifference(candidate: Proportion, baseline: Proportion, confidence = 0.95): DifferenceInterval {
  const c = wilsonInterval(candidate, confidence);
  const b = wilsonInterval(baseline, confidence);
  return { estimate: c.estimate - b.estimate, ...moverDifference(c, b), confidence, method: 'newcombe-hybrid-score' };
}
