/**
 * A small seeded generator (sfc32, seeded through splitmix32) so a simulation, and a bootstrap, is a pure function
 * of its seed. Each concern draws from its own stream (`fork`), so adding a draw in one place does not shift
 * every other random choice of the run.
 */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number | string) {
    let h = typeof seed === 'number' ? seed >>> 0 : hashString(seed);
    const next = (): number => {
      h = (h + 0x9e3779b9) | 0;
      let z = h;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.uint32();
  }

  /** An independent stream named by `label`, derived from this generator's seed state. */
  fork(label: string): Rng {
    return new Rng(`${this.a}:${this.b}:${this.c}:${this.d}:${label}`);
  }

  uint32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.uint32() / 4294967296;
  }

  /** Uniform in (0, 1): safe under log and the inverse CDFs. */
  open(): number {
    return (this.uint32() + 0.5) / 4294967296;
  }

  chance(p: number): boolean {
    return p > 0 && this.next() < p;
  }

  uniform(min: number, max: number): number {
    return min + (max - min) * this.next();
  }

  int(minInclusive: number, maxInclusive: number): number {
    return minInclusive + Math.floor(this.next() * (maxInclusive - minInclusive + 1));
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  exponential(mean: number): number {
    return -mean * Math.log(1 - this.next());
  }

  normal(): number {
    // Box-Muller; 1 - next() keeps the log argument in (0, 1].
    return Math.sqrt(-2 * Math.log(1 - this.next())) * Math.cos(2 * Math.PI * this.next());
  }

  /** A Poisson count with the given mean: inversion, and a rounded normal above a mean of 500 (error under 1 %). */
  poisson(mean: number): number {
    if (mean > 500) return Math.max(0, Math.round(mean + Math.sqrt(mean) * this.normal()));
    let k = 0;
    let p = Math.exp(-mean);
    let cdf = p;
    const u = this.next();
    while (u > cdf && p > 0) {
      k++;
      p *= mean / k;
      cdf += p;
    }
    return k;
  }

  /** A binomial count by summing Bernoulli draws: O(n), for the small n of tests and simulations. */
  binomial(n: number, p: number): number {
    let k = 0;
    for (let i = 0; i < n; i++) if (this.next() < p) k++;
    return k;
  }

  /** Lognormal with the given median and shape sigma. */
  lognormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal());
  }

  /** Pareto (type I) with minimum `scale` and tail index `alpha`: heavy tails for alpha near 1. */
  pareto(scale: number, alpha: number): number {
    return scale / Math.pow(1 - this.next(), 1 / alpha);
  }
}

export function hashString(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}
