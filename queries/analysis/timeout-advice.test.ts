import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sortAscending } from './quantiles.ts';
import { Rng } from '../../common/index.ts';
import {
  fitGeneralizedPareto,
  gpdQuantileAbove,
  gpdSample,
  sampleKnown,
  trueExceedanceProbability,
  trueQuantileAbove,
  type KnownDistribution,
} from './tail.ts';
import { adviseTimeout, minimumEmpiricalSamples } from './timeout-advice.ts';

const near = (actual: number, expected: number, rel: number, label = ''): void =>
  assert.ok(Math.abs(actual - expected) <= rel * Math.abs(expected), `${label} ${actual} vs ${expected}`);

const draw = (d: KnownDistribution, n: number, rng: Rng): Float64Array =>
  sortAscending(Array.from({ length: n }, () => sampleKnown(d, rng)));

test('known distributions: exceedance probabilities and quantiles invert each other', () => {
  const lognormal: KnownDistribution = { kind: 'lognormal', medianMs: 5, sigma: 0.8 };
  // median · exp(σ · z_0.9999) with z_0.9999 = 3.719016485455709 (scipy).
  near(trueQuantileAbove(lognormal, 1e-4), 5 * Math.exp(0.8 * 3.719016485455709), 1e-10);
  near(trueExceedanceProbability({ kind: 'shifted-exponential', offsetMs: 2, meanMs: 3 }, 2 + 3 * Math.log(1e4)), 1e-4, 1e-12);
  near(trueExceedanceProbability({ kind: 'pareto', scaleMs: 10, alpha: 2 }, 100), 0.01, 1e-12);
  // The simulator's transfer model: lognormal body, a Pareto tail with probability 1 %.
  const mixture: KnownDistribution = {
    kind: 'mixture',
    components: [
      { weight: 0.99, distribution: lognormal },
      { weight: 0.01, distribution: { kind: 'pareto', scaleMs: 20, alpha: 2.5 } },
    ],
  };
  near(trueExceedanceProbability(mixture, trueQuantileAbove(mixture, 1e-4)), 1e-4, 1e-9);
});

test('GPD quantile formula and the PWM fit recover known parameters', () => {
  near(gpdQuantileAbove({ shape: 0.5, scale: 2 }, 0.01), 36, 1e-12);
  near(gpdQuantileAbove({ shape: 0, scale: 2 }, 0.01), 2 * Math.log(100), 1e-12);
  const rng = new Rng(5);
  for (const truth of [
    { shape: 0.2, scale: 3 },
    { shape: 0, scale: 1 },
    { shape: -0.2, scale: 5 },
  ]) {
    const fit = fitGeneralizedPareto(sortAscending(Array.from({ length: 20_000 }, () => gpdSample(truth, rng))));
    assert.ok(Math.abs(fit.shape - truth.shape) < 0.03, `shape ${fit.shape} vs ${truth.shape}`);
    near(fit.scale, truth.scale, 0.04, 'scale');
  }
  assert.deepEqual(fitGeneralizedPareto(new Float64Array(40)), { shape: 0, scale: 0 });
});

test('the method follows how far the data reach: too few, tail fit, empirical', () => {
  assert.equal(minimumEmpiricalSamples(1e-4), 36_887);
  assert.equal(minimumEmpiricalSamples(1e-3), 3_688);
  const rng = new Rng(3);
  const d: KnownDistribution = { kind: 'shifted-exponential', offsetMs: 2, meanMs: 3 };
  const few = adviseTimeout(draw(d, 299, rng));
  assert.deepEqual(few, { n: 299, targetProbability: 1e-4, confidence: 0.95, method: 'too-few', exceedances: 29, minExceedances: 30 });
  assert.equal(adviseTimeout(new Float64Array(0)).method, 'too-few');
  assert.throws(() => adviseTimeout([3, 1, 2]), RangeError);
  const fitted = adviseTimeout(draw(d, 300, rng));
  assert.equal(fitted.method, 'tail-fit');
  if (fitted.method === 'tail-fit') assert.equal(fitted.exceedances, 30);
  // 36,887 values reach p = 1e-4: the interval's upper bound is the largest value.
  const sample = draw(d, 36_887, rng);
  const empirical = adviseTimeout(sample);
  assert.equal(empirical.method, 'empirical');
  if (empirical.method === 'empirical') assert.equal(empirical.upperMs, sample[sample.length - 1]);
  assert.equal(adviseTimeout(sample.subarray(1)).method, 'tail-fit');
  // Deterministic given the seed: the same data give the same advice.
  const again = draw(d, 3000, new Rng(9));
  assert.deepEqual(adviseTimeout(again, { seed: 4 }), adviseTimeout(again, { seed: 4 }));
});

test('measured coverage of the advice: the interval covers the true (1 - p) quantile of known tails', (t) => {
  const p = 1e-4;
  const tailFit = (d: KnownDistribution, seed: number, reps: number): { covered: number; tooShort: number } => {
    const truth = trueQuantileAbove(d, p);
    const rng = new Rng(seed);
    let covered = 0;
    let tooShort = 0;
    for (let r = 0; r < reps; r++) {
      const advice = adviseTimeout(draw(d, 2000, rng), { targetProbability: p, bootstrapReplicates: 300, seed: r + 1 });
      assert.equal(advice.method, 'tail-fit');
      if (advice.method !== 'tail-fit') continue;
      if (advice.lowerMs <= truth && truth <= advice.upperMs) covered++;
      else if (advice.upperMs < truth) tooShort++;
    }
    return { covered: covered / reps, tooShort: tooShort / reps };
  };
  const lognormal: KnownDistribution = { kind: 'lognormal', medianMs: 5, sigma: 0.8 };
  // The simulator's transfer model (emitter/sim): a lognormal body with a Pareto tail 1 % of the time.
  const simulated: KnownDistribution = {
    kind: 'mixture',
    components: [
      { weight: 0.99, distribution: { kind: 'lognormal', medianMs: 5, sigma: 0.5 } },
      { weight: 0.01, distribution: { kind: 'pareto', scaleMs: 20, alpha: 2.5 } },
    ],
  };
  const a = tailFit(lognormal, 21, 200);
  const b = tailFit(simulated, 23, 200);
  const empiricalRng = new Rng(22);
  const empiricalReps = 60;
  let empirical = 0;
  for (let r = 0; r < empiricalReps; r++) {
    const advice = adviseTimeout(draw(lognormal, 40_000, empiricalRng), { targetProbability: p });
    const truth = trueQuantileAbove(lognormal, p);
    if (advice.method === 'empirical' && advice.lowerMs <= truth && truth <= advice.upperMs) empirical++;
  }
  t.diagnostic(
    `tail fit, n=2000, 200 reps: lognormal coverage ${a.covered} (upper bound short of the truth ${a.tooShort}); ` +
      `lognormal+Pareto mixture coverage ${b.covered} (short ${b.tooShort}); empirical, n=40000, ${empiricalReps} reps: ${empirical / empiricalReps}`,
  );
  // The tail fit carries the fit's sampling error but not the GPD's model error at the threshold: about 0.91 on a
  // lognormal (see bootstrapExtrapolation), so the floor is below 0.93.
  for (const { covered, tooShort } of [a, b]) {
    assert.ok(covered >= 0.88 && covered <= 0.99, `tail-fit coverage ${covered}`);
    assert.ok(tooShort <= 0.1, `advice short of the truth in ${tooShort}`);
  }
  assert.ok(empirical / empiricalReps >= 0.9, `empirical coverage ${empirical / empiricalReps}`);
});
