import assert from 'node:assert/strict';
import { test } from 'node:test';
import { quantileDifference, quantileInterval, sortAscending } from './quantiles.ts';
import { Rng } from '../../common/index.ts';
import { sampleKnown, type KnownDistribution } from './tail.ts';
import { judge } from './verdict.ts';

const ranks = (n: number): Float64Array => Float64Array.from({ length: n }, (_, i) => i + 1);

test('order-statistic ranks match the textbook tables for the median', () => {
  // Conover's table: n = 10 gives (X_(2), X_(9)), n = 100 gives (X_(40), X_(61)) at 95 %.
  assert.deepEqual([quantileInterval(ranks(10), 0.5).lower, quantileInterval(ranks(10), 0.5).upper], [2, 9]);
  const hundred = quantileInterval(ranks(100), 0.5);
  assert.deepEqual([hundred.lowerRank, hundred.upperRank, hundred.estimate], [40, 61, 51]);
});

test('a bound is infinite when the data do not reach the quantile, and unsorted input is refused', () => {
  // P(X_(100) >= p99) = 1 - 0.99^100 = 0.63 < 0.975: no order statistic bounds p99 of 100 values from above.
  const p99 = quantileInterval(ranks(100), 0.99);
  assert.equal(p99.upper, Infinity);
  assert.equal(p99.upperRank, 101);
  assert.ok(Number.isFinite(p99.lower));
  assert.equal(quantileInterval(ranks(3), 0.5).lower, -Infinity);
  assert.throws(() => quantileInterval([2, 1, 3], 0.5), RangeError);
  assert.throws(() => quantileInterval([], 0.5), RangeError);
  const open = quantileDifference(ranks(100), ranks(100), 0.99);
  assert.equal(open.upper, Infinity);
  assert.deepEqual(judge(open, 'lower-is-better'), { verdict: 'no detectable difference', minimumDetectableDifference: Infinity });
});

test('interpolated bounds lie between the exact interval and the estimate', () => {
  const values = sortAscending(Array.from({ length: 500 }, (_, i) => (i * 7919) % 1000));
  const exact = quantileInterval(values, 0.9);
  const interpolated = quantileInterval(values, 0.9, 0.95, { interpolate: true });
  assert.ok(exact.lower <= interpolated.lower && interpolated.lower <= exact.estimate);
  assert.ok(exact.estimate <= interpolated.upper && interpolated.upper <= exact.upper);
});

test('a shifted candidate is found worse on p90, with an interval covering the shift', () => {
  const rng = new Rng(11);
  const d: KnownDistribution = { kind: 'lognormal', medianMs: 5, sigma: 0.6 };
  const baseline = sortAscending(Array.from({ length: 2000 }, () => sampleKnown(d, rng)));
  const candidate = sortAscending(Array.from({ length: 2000 }, () => 3 + sampleKnown(d, rng)));
  const diff = quantileDifference(candidate, baseline, 0.9);
  assert.ok(diff.lower <= 3 && 3 <= diff.upper, `${diff.lower}..${diff.upper}`);
  assert.deepEqual(judge(diff, 'lower-is-better'), { verdict: 'worse' });
});

test('measured coverage of the quantile difference (MOVER over interpolated order statistics)', (t) => {
  const d: KnownDistribution = { kind: 'lognormal', medianMs: 5, sigma: 0.8 };
  const measure = (q: number, n: number, reps: number, seed: number): number => {
    const rng = new Rng(seed);
    let covered = 0;
    for (let r = 0; r < reps; r++) {
      const a = sortAscending(Array.from({ length: n }, () => sampleKnown(d, rng)));
      const b = sortAscending(Array.from({ length: n }, () => sampleKnown(d, rng)));
      const diff = quantileDifference(a, b, q);
      if (diff.lower <= 0 && 0 <= diff.upper) covered++;
    }
    return covered / reps;
  };
  const p50 = measure(0.5, 300, 2000, 7);
  const p90 = measure(0.9, 300, 2000, 8);
  const p99 = measure(0.99, 1000, 1000, 9);
  t.diagnostic(`coverage of identical lognormal arms: p50 (n=300, 2000 reps) ${p50}, p90 (n=300) ${p90}, p99 (n=1000, 1000 reps) ${p99}`);
  assert.ok(p50 >= 0.93 && p50 <= 0.97, `p50 ${p50}`);
  assert.ok(p90 >= 0.93 && p90 <= 0.97, `p90 ${p90}`);
  // p99 of 1,000 rests on the top ~20 values: discreteness keeps it conservative, never below nominal.
  assert.ok(p99 >= 0.93 && p99 <= 0.99, `p99 ${p99}`);
});
