// Special functions under the distribution functions: log-gamma and the regularized incomplete beta and gamma
// functions. Implemented here rather than taken from a package: the ones on npm are either unmaintained, untyped, or
// pull in a whole numerics library, and these are ~100 lines of textbook numerics (Lanczos; Lentz's continued
// fractions as in Numerical Recipes, 3rd ed., 6.2 and 6.4), checked against scipy in special.test.ts.

const EPS = 1e-15;
const TINY = 1e-300;
const MAX_ITERATIONS = 100_000;

// Lanczos approximation, g = 7, n = 9 (relative error below 1e-15 for x > 0).
const LANCZOS = [
  0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059, 12.507343278686905,
  -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
];

/** ln Γ(x) for x > 0. */
export function lnGamma(x: number): number {
  if (!(x > 0)) throw new RangeError(`lnGamma needs x > 0, got ${x}`);
  // Reflection keeps the series in its accurate range; only x < 0.5 takes it (Γ(x)Γ(1-x) = π / sin(πx)).
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - lnGamma(1 - x);
  const z = x - 1;
  let sum = LANCZOS[0] as number;
  for (let i = 1; i < LANCZOS.length; i++) sum += (LANCZOS[i] as number) / (z + i);
  const t = z + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(sum);
}

/** ln B(a, b). */
export const lnBeta = (a: number, b: number): number => lnGamma(a) + lnGamma(b) - lnGamma(a + b);

/** The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1. */
export function regularizedBeta(x: number, a: number, b: number): number {
  if (!(a > 0 && b > 0) || !(x >= 0 && x <= 1)) throw new RangeError(`regularizedBeta(${x}, ${a}, ${b}) is undefined`);
  if (x === 0 || x === 1) return x;
  const front = Math.exp(a * Math.log(x) + b * Math.log1p(-x) - lnBeta(a, b));
  // The continued fraction converges fast only for x below the mean-ish point (a+1)/(a+b+2); above it, by symmetry.
  if (x < (a + 1) / (a + b + 2)) return (front * betaContinuedFraction(x, a, b)) / a;
  return 1 - (front * betaContinuedFraction(1 - x, b, a)) / b;
}

function betaContinuedFraction(x: number, a: number, b: number): number {
  // Modified Lentz; converges in O(sqrt(max(a, b))) terms, so binomial tails with n in the millions stay cheap.
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < TINY) d = TINY;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= MAX_ITERATIONS; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < EPS) return h;
  }
  throw new RangeError(`incomplete beta did not converge for x=${x}, a=${a}, b=${b}`);
}

/** The regularized lower incomplete gamma function P(a, x), and its complement Q(a, x) = 1 - P(a, x). */
export function regularizedGamma(a: number, x: number): { p: number; q: number } {
  if (!(a > 0) || !(x >= 0)) throw new RangeError(`regularizedGamma(${a}, ${x}) is undefined`);
  if (x === 0) return { p: 0, q: 1 };
  if (x === Infinity) return { p: 1, q: 0 };
  const logFront = a * Math.log(x) - x - lnGamma(a);
  // The series is accurate for P below the mean, the continued fraction for Q above it: each side computes the
  // small tail directly, so neither loses digits to 1 - (something near 1).
  if (x < a + 1) {
    let term = 1 / a;
    let sum = term;
    for (let n = 1; n <= MAX_ITERATIONS; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * EPS) {
        const p = sum * Math.exp(logFront);
        return { p, q: 1 - p };
      }
    }
    throw new RangeError(`incomplete gamma series did not converge for a=${a}, x=${x}`);
  }
  const q = Math.exp(logFront) * gammaContinuedFraction(a, x);
  return { p: 1 - q, q };
}

function gammaContinuedFraction(a: number, x: number): number {
  let b = x + 1 - a;
  let c = 1 / TINY;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i <= MAX_ITERATIONS; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < TINY) d = TINY;
    c = b + an / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < EPS) return h;
  }
  throw new RangeError(`incomplete gamma fraction did not converge for a=${a}, x=${x}`);
}
