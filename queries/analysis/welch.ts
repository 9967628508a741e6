// Across runs of an experiment (the report's 21-run design, 7 per arm): each run is one observation of a metric,
// so arms are compared on per-run values with Welch's t interval, which does not assume equal variances per arm.
import { studentTQuantile } from './distributions.ts';
import { checkConfidence, type DifferenceInterval } from './interval.ts';

function meanAndVariance(values: readonly number[]): { mean: number; variance: number } {
  const mean = values.reduce((s, v) => s + v, 0) / values.length;
  const variance = values.reduce((s, v) => s + (v - mean) ** 2, 0) / (values.length - 1);
  return { mean, variance };
}

/** Welch's interval for mean(candidate runs) - mean(baseline runs), Welch-Satterthwaite degrees of freedom. */
export function welchDifference(candidateRuns: readonly number[], baselineRuns: readonly number[], confidence = 0.95): DifferenceInterval {
  if (candidateRuns.length < 2 || baselineRuns.length < 2) {
    throw new RangeError(`Welch's interval needs at least 2 runs per arm, got ${candidateRuns.length} and ${baselineRuns.length}`);
  }
  checkConfidence(confidence);
  const c = meanAndVariance(candidateRuns);
  const b = meanAndVariance(baselineRuns);
  const vc = c.variance / candidateRuns.length;
  const vb = b.variance / baselineRuns.length;
  const se = Math.sqrt(vc + vb);
  const estimate = c.mean - b.mean;
  const base = { estimate, confidence, method: 'welch-t' as const };
  // Every run equal in both arms: no spread to scale by, the difference is known exactly (as far as runs say).
  if (se === 0) return { ...base, lower: estimate, upper: estimate, df: candidateRuns.length + baselineRuns.length - 2 };
  const df = (vc + vb) ** 2 / (vc ** 2 / (candidateRuns.length - 1) + vb ** 2 / (baselineRuns.length - 1));
  const t = studentTQuantile(1 - (1 - confidence) / 2, df);
  return { ...base, lower: estimate - t * se, upper: estimate + t * se, df };
}
