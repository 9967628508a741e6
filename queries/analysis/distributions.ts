// Distribution and quantile functions for the intervals: normal, Student t, beta, gamma and chi-square, binomial.
// Quantiles invert the CDFs by Newton steps kept inside a shrinking bracket (bisection when a step leaves it), from
// the classic closed-form starting points, so they converge in a handful of steps and never diverge.
import { lnBeta, lnGamma, regularizedBeta, regularizedGamma } from './special.ts';

function checkProbability(p: number, name: string): void {
  if (!(p >= 0 && p <= 1)) throw new RangeError(`${name} needs a probability in [0, 1], got ${p}`);
}

/**
 * Solves cdf(x) = p for a continuous increasing CDF on (lo, hi) by bracketed Newton. Relative tolerance 1e-13 on x:
 * the tests ask for 1e-8, and the margin absorbs the CDFs' own rounding.
 */
function invertCdf(cdf: (x: number) => number, density: (x: number) => number, p: number, guess: number, lo: number, hi: number): number {
  let x = Math.min(Math.max(guess, lo), hi);
  for (let i = 0; i < 300; i++) {
    const f = cdf(x) - p;
    if (f === 0) return x;
    if (f < 0) lo = x;
    else hi = x;
    const dens = density(x);
    let next = dens > 0 && Number.isFinite(dens) ? x - f / dens : NaN;
    if (!(next > lo && next < hi)) next = hi === Infinity ? Math.max(2 * x, 1) : lo === -Infinity ? Math.min(2 * x, -1) : (lo + hi) / 2;
    if (Math.abs(next - x) <= 1e-13 * Math.abs(x) || hi - lo <= 1e-13 * Math.abs(x) || next === x) return next;
    x = next;
  }
  return x;
}

/** Standard normal CDF Φ(x), accurate in both tails (through the incomplete gamma function: erfc(y) = Q(1/2, y²)). */
export function normalCdf(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const tail = 0.5 * regularizedGamma(0.5, (x * x) / 2).q;
  return x < 0 ? tail : 1 - tail;
}

/** Standard normal density. */
export const normalDensity = (x: number): number => Math.exp(-0.5 * x * x) / Math.sqrt(2 * Math.PI);

// Acklam's rational approximation (relative error 1.2e-9) as the starting point; Newton on the exact CDF polishes it.
const A = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
const B = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
const C = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
const D = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
const poly = (c: number[], x: number): number => c.reduce((acc, v) => acc * x + v, 0);

/** The standard normal quantile Φ⁻¹(p). */
export function normalQuantile(p: number): number {
  checkProbability(p, 'normalQuantile');
  if (p === 0) return -Infinity;
  if (p === 1) return Infinity;
  if (p > 0.5) return -normalQuantile(1 - p);
  let x: number;
  if (p < 0.02425) {
    const q = Math.sqrt(-2 * Math.log(p));
    x = poly(C, q) / (poly(D, q) * q + 1);
  } else {
    const q = p - 0.5;
    const r = q * q;
    x = (poly(A, r) * q) / (poly(B, r) * r + 1);
  }
  // Two Newton steps on the lower tail (computed directly, never as 1 - Φ): the error squares each step.
  for (let i = 0; i < 2; i++) x -= (normalCdf(x) - p) / normalDensity(x);
  return x;
}

/** Student t CDF with df > 0 degrees of freedom. */
export function studentTCdf(t: number, df: number): number {
  if (!(df > 0)) throw new RangeError(`studentTCdf needs df > 0, got ${df}`);
  const tail = 0.5 * regularizedBeta(df / (df + t * t), df / 2, 0.5);
  return t < 0 ? tail : 1 - tail;
}

/** Student t quantile; df = Infinity is the normal quantile. */
export function studentTQuantile(p: number, df: number): number {
  checkProbability(p, 'studentTQuantile');
  if (!(df > 0)) throw new RangeError(`studentTQuantile needs df > 0, got ${df}`);
  if (df === Infinity) return normalQuantile(p);
  if (p === 0.5) return 0;
  if (p > 0.5) return -studentTQuantile(1 - p, df);
  if (p === 0) return -Infinity;
  // P(T < -t) = I_x(df/2, 1/2) / 2 with x = df / (df + t²). Far in the tail x is small and t = sqrt(df (1-x) / x) is
  // exact; near the centre x is close to 1, so 1 - x is solved for directly to keep its digits.
  const x = betaQuantile(2 * p, df / 2, 0.5);
  if (x < 0.5) return -Math.sqrt((df * (1 - x)) / x);
  const y = betaQuantile(1 - 2 * p, 0.5, df / 2);
  return -Math.sqrt((df * y) / (1 - y));
}

/** Beta(a, b) quantile: the x with I_x(a, b) = p. */
export function betaQuantile(p: number, a: number, b: number): number {
  checkProbability(p, 'betaQuantile');
  if (!(a > 0 && b > 0)) throw new RangeError(`betaQuantile needs a, b > 0, got ${a}, ${b}`);
  if (p === 0 || p === 1) return p;
  // The upper half by symmetry, so the solved-for tail is always the small one (relative accuracy near 0).
  if (p > 0.5) return 1 - betaQuantile(1 - p, b, a);
  const logB = lnBeta(a, b);
  const density = (x: number): number => (x <= 0 || x >= 1 ? 0 : Math.exp((a - 1) * Math.log(x) + (b - 1) * Math.log1p(-x) - logB));
  return invertCdf((x) => regularizedBeta(x, a, b), density, p, betaGuess(p, a, b, logB), 0, 1);
}

// Starting point of Numerical Recipes' invbetai (3rd ed., 6.14): a normal approximation when both shapes are >= 1,
// otherwise the power-law behaviour of each end.
function betaGuess(p: number, a: number, b: number, logB: number): number {
  if (a >= 1 && b >= 1) {
    const t = Math.sqrt(-2 * Math.log(p));
    const z = -((2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t);
    const al = (z * z - 3) / 6;
    const h = 2 / (1 / (2 * a - 1) + 1 / (2 * b - 1));
    const w = (z * Math.sqrt(al + h)) / h - (1 / (2 * b - 1) - 1 / (2 * a - 1)) * (al + 5 / 6 - 2 / (3 * h));
    return a / (a + b * Math.exp(2 * w));
  }
  const lna = Math.log(a / (a + b));
  const lnb = Math.log(b / (a + b));
  const t = Math.exp(a * lna - logB) / a;
  const u = Math.exp(b * lnb - logB) / b;
  const w = t + u;
  return p < t / w ? Math.pow(a * w * p * Math.exp(logB), 1 / a) : 1 - Math.pow(b * w * (1 - p) * Math.exp(logB), 1 / b);
}

/** Gamma(shape, scale 1) quantile: the x with P(shape, x) = p. */
export function gammaQuantile(p: number, shape: number): number {
  checkProbability(p, 'gammaQuantile');
  if (!(shape > 0)) throw new RangeError(`gammaQuantile needs shape > 0, got ${shape}`);
  if (p === 0) return 0;
  if (p === 1) return Infinity;
  const logG = lnGamma(shape);
  const density = (x: number): number => (x <= 0 ? 0 : Math.exp((shape - 1) * Math.log(x) - x - logG));
  return invertCdf((x) => regularizedGamma(shape, x).p, density, p, gammaGuess(p, shape), 0, Infinity);
}

// Starting point of Numerical Recipes' invgammp: Wilson-Hilferty for shape > 1, the small-x power law otherwise.
function gammaGuess(p: number, a: number): number {
  if (a > 1) {
    const pp = p < 0.5 ? p : 1 - p;
    const t = Math.sqrt(-2 * Math.log(pp));
    let z = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t;
    if (p < 0.5) z = -z;
    return Math.max(1e-3, a * Math.pow(1 - 1 / (9 * a) - z / (3 * Math.sqrt(a)), 3));
  }
  const t = 1 - a * (0.253 + a * 0.12);
  return p < t ? Math.pow(p / t, 1 / a) : 1 - Math.log(1 - (p - t) / (1 - t));
}

/** Chi-square quantile with df degrees of freedom. */
export const chiSquareQuantile = (p: number, df: number): number => 2 * gammaQuantile(p, df / 2);

/** P(Bin(n, q) <= k), exact through the incomplete beta function (cheap for any n). */
export function binomialCdf(k: number, n: number, q: number): number {
  if (k < 0) return 0;
  if (k >= n) return 1;
  if (q <= 0) return 1;
  if (q >= 1) return 0;
  return regularizedBeta(1 - q, n - k, k + 1);
}
