// Tails of durations: the generalized Pareto distribution (GPD) that peaks over a threshold follow (Pickands-
// Balkema-de Haan), fitted by probability-weighted moments, and known distributions with their true exceedance
// probabilities, the truth the advice is tested against (the simulator's transfer times are such distributions).
import { normalCdf, normalQuantile } from './distributions.ts';
import type { Rng } from '../../common/index.ts';

/** GPD of excesses over a threshold: P(Y > y) = (1 + shape·y/scale)^(-1/shape); shape 0 is the exponential. */
export interface GeneralizedPareto {
  shape: number;
  scale: number;
}

/** (e^{ξL} - 1)/ξ, written to stay exact as ξ → 0, where it tends to L (the exponential case). */
const expm1Over = (shape: number, l: number): number => (Math.abs(shape) < 1e-12 ? l : Math.expm1(shape * l) / shape);

/** The excess y with P(Y > y) = tail, for 0 < tail <= 1. */
export const gpdQuantileAbove = (g: GeneralizedPareto, tail: number): number => g.scale * expm1Over(g.shape, -Math.log(tail));

/** A GPD draw by inversion. */
export const gpdSample = (g: GeneralizedPareto, rng: Rng): number => gpdQuantileAbove(g, rng.open());

/**
 * `out.length` GPD draws in ascending order, without a sort: the order statistics of m standard exponentials are the
 * partial sums of Z_i / (m - i) for i = 0..m-1 (Rényi's representation), and a GPD excess is an increasing function of
 * its exponential, -log P(Y > y). The parametric bootstrap draws hundreds of such samples a group, and the sort was
 * half its time.
 */
export function sortedGpdSample(g: GeneralizedPareto, rng: Rng, out: Float64Array): void {
  const m = out.length;
  let exponential = 0;
  for (let i = 0; i < m; i++) {
    exponential += -Math.log(rng.open()) / (m - i);
    out[i] = g.scale * expm1Over(g.shape, exponential);
  }
}

/**
 * Probability-weighted-moment fit (Hosking & Wallis 1987) of excesses sorted ascending. Chosen over maximum
 * likelihood because it is closed-form (the parametric bootstrap refits it hundreds of times) and, for the shapes
 * latency tails have (|ξ| < 0.5), about as efficient at the sample sizes the advice uses it for (30 to 2,000
 * excesses), without ML's failures to converge on small samples.
 */
export function fitGeneralizedPareto(sortedExcesses: ArrayLike<number>): GeneralizedPareto {
  const k = sortedExcesses.length;
  let a0 = 0;
  let a1 = 0;
  for (let j = 0; j < k; j++) {
    const y = sortedExcesses[j] as number;
    a0 += y;
    a1 += (1 - (j + 1 - 0.35) / k) * y;
  }
  a0 /= k;
  a1 /= k;
  // All excesses 0 (ties at the threshold): no tail beyond it in the data; a degenerate fit of scale 0.
  if (!(a0 > 0)) return { shape: 0, scale: 0 };
  const hoskingK = a0 / (a0 - 2 * a1) - 2;
  return { shape: -hoskingK, scale: (2 * a0 * a1) / (a0 - 2 * a1) };
}

/** A known distribution of a duration in ms. */
export type KnownDistribution =
  | { kind: 'lognormal'; medianMs: number; sigma: number }
  | { kind: 'shifted-exponential'; offsetMs: number; meanMs: number }
  | { kind: 'pareto'; scaleMs: number; alpha: number }
  | { kind: 'mixture'; components: readonly { weight: number; distribution: KnownDistribution }[] };

/** The true P(X > t). */
export function trueExceedanceProbability(d: KnownDistribution, t: number): number {
  switch (d.kind) {
    case 'lognormal':
      return t <= 0 ? 1 : normalCdf(-(Math.log(t) - Math.log(d.medianMs)) / d.sigma);
    case 'shifted-exponential':
      return t <= d.offsetMs ? 1 : Math.exp(-(t - d.offsetMs) / d.meanMs);
    case 'pareto':
      return t <= d.scaleMs ? 1 : Math.pow(d.scaleMs / t, d.alpha);
    case 'mixture':
      return d.components.reduce((s, c) => s + c.weight * trueExceedanceProbability(c.distribution, t), 0);
  }
}

/** The true t with P(X > t) = p (0 < p < 1): closed forms, bisection on the log scale for a mixture. */
export function trueQuantileAbove(d: KnownDistribution, p: number): number {
  switch (d.kind) {
    case 'lognormal':
      return d.medianMs * Math.exp(-d.sigma * normalQuantile(p));
    case 'shifted-exponential':
      return d.offsetMs - d.meanMs * Math.log(p);
    case 'pareto':
      return d.scaleMs * Math.pow(p, -1 / d.alpha);
    case 'mixture': {
      let lo = 1e-9;
      let hi = 1;
      while (trueExceedanceProbability(d, hi) > p) hi *= 2;
      for (let i = 0; i < 200 && hi - lo > 1e-12 * hi; i++) {
        const mid = Math.sqrt(lo * hi);
        if (trueExceedanceProbability(d, mid) > p) lo = mid;
        else hi = mid;
      }
      return hi;
    }
  }
}

/** A draw from a known distribution (for simulations and tests). */
export function sampleKnown(d: KnownDistribution, rng: Rng): number {
  if (d.kind === 'lognormal') return d.medianMs * Math.exp(d.sigma * rng.normal());
  if (d.kind !== 'mixture') return trueQuantileAbove(d, rng.open());
  let u = rng.next();
  for (const c of d.components) {
    if (u < c.weight) return sampleKnown(c.distribution, rng);
    u -= c.weight;
  }
  return sampleKnown((d.components[d.components.length - 1] as { distribution: KnownDistribution }).distribution, rng);
}
