import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DifferenceInterval } from './interval.ts';
import { newcombeDifference, wilsonInterval } from './proportions.ts';
import { garwoodRate, rateDifference } from './rates.ts';
import { Rng } from '../../common/index.ts';
import { judge } from './verdict.ts';
import { welchDifference } from './welch.ts';

const near = (actual: number, expected: number, tol: number, label = ''): void =>
  assert.ok(Math.abs(actual - expected) <= tol, `${label} ${actual} vs ${expected}`);

/** Share of `reps` seeded repetitions whose interval covers `truth`. */
function coverage(reps: number, seed: number, draw: (rng: Rng) => { lower: number; upper: number }, truth: number): number {
  const rng = new Rng(seed);
  let covered = 0;
  for (let i = 0; i < reps; i++) {
    const { lower, upper } = draw(rng);
    if (lower <= truth && truth <= upper) covered++;
  }
  return covered / reps;
}

test('Wilson interval matches the formula, and stays within [0, 1] at 0 successes', () => {
  const w = wilsonInterval({ successes: 81, trials: 263 });
  near(w.lower, 0.2552885198782742, 1e-12);
  near(w.upper, 0.36620957698280004, 1e-12);
  const zero = wilsonInterval({ successes: 0, trials: 10 });
  assert.equal(zero.lower, 0);
  near(zero.upper, 0.2775327998628892, 1e-12);
  assert.throws(() => wilsonInterval({ successes: 3, trials: 2 }), RangeError);
});

test("Newcombe's method 10 reproduces the worked examples of Newcombe (1998), Table II", () => {
  const cases: [number, number, number, number, number, number][] = [
    [56, 70, 48, 80, 0.0524, 0.3339],
    [9, 10, 3, 10, 0.1705, 0.809],
    [6, 7, 2, 7, 0.0582, 0.8062],
    [5, 56, 0, 29, -0.0381, 0.1926],
    [0, 10, 0, 20, -0.1611, 0.2775],
    [10, 10, 0, 20, 0.6791, 1],
    [10, 10, 0, 10, 0.6075, 1],
  ];
  for (const [x1, n1, x2, n2, lower, upper] of cases) {
    const d = newcombeDifference({ successes: x1, trials: n1 }, { successes: x2, trials: n2 });
    near(d.estimate, x1 / n1 - x2 / n2, 1e-12);
    near(d.lower, lower, 5e-5, `${x1}/${n1} - ${x2}/${n2} lower`);
    near(d.upper, upper, 5e-5, `${x1}/${n1} - ${x2}/${n2} upper`);
  }
});

test('Garwood rate per 10,000 holds matches chi-square limits, zero counts included', () => {
  const zero = garwoodRate({ events: 0, exposure: 20_000 });
  assert.equal(zero.lower, 0);
  near(zero.upper, 1.8444397270569677, 1e-9);
  const three = garwoodRate({ events: 3, exposure: 20_000 });
  near(three.estimate, 1.5, 1e-12);
  near(three.lower, 0.3093360614478007, 1e-9);
  near(three.upper, 4.383636534871162, 1e-9);
  const d = rateDifference({ events: 3, exposure: 20_000 }, { events: 12, exposure: 50_000 });
  // MOVER by hand from the scipy limits: 12 / 5 per 10,000 has limits 1.2401150217444434 and 4.192317009635392.
  near(d.estimate, 1.5 - 2.4, 1e-12);
  near(d.lower, -0.9 - Math.hypot(1.5 - 0.3093360614478007, 4.192317009635392 - 2.4), 1e-9);
  near(d.upper, -0.9 + Math.hypot(4.383636534871162 - 1.5, 2.4 - 1.2401150217444434), 1e-9);
});

test("Welch's interval matches scipy's, with Welch-Satterthwaite df", () => {
  const a = [10.2, 11.1, 9.8, 10.5, 10.9, 11.4, 10.0];
  const b = [9.1, 9.9, 10.3, 9.5, 9.0, 9.7, 9.6];
  const d = welchDifference(a, b);
  near(d.lower, 0.35118375893324794, 1e-9);
  near(d.upper, 1.5916733839238915, 1e-9);
  near(d.df ?? NaN, 11.141763707743292, 1e-9);
  const same = welchDifference([1, 1, 1], [1, 1]);
  assert.deepEqual([same.lower, same.upper], [0, 0]);
  assert.throws(() => welchDifference([1], [1, 2]), RangeError);
});

test('verdict follows the direction, and states the minimum detectable difference when there is none', () => {
  const base = { confidence: 0.95, method: 'newcombe-hybrid-score' as const };
  const up: DifferenceInterval = { ...base, estimate: 0.05, lower: 0.01, upper: 0.09 };
  assert.deepEqual(judge(up, 'lower-is-better'), { verdict: 'worse' });
  assert.deepEqual(judge(up, 'higher-is-better'), { verdict: 'better' });
  const down: DifferenceInterval = { ...base, estimate: -0.05, lower: -0.09, upper: -0.01 };
  assert.deepEqual(judge(down, 'lower-is-better'), { verdict: 'better' });
  const none = judge({ ...base, estimate: 0.01, lower: -0.0392, upper: 0.0592 }, 'lower-is-better');
  assert.equal(none.verdict, 'no detectable difference');
  // Half-width 0.0492 = 1.96 SE, so SE = 0.0251 and MDD = (1.96 + 0.8416) × 0.0251 = 0.0703.
  if (none.verdict === 'no detectable difference') near(none.minimumDetectableDifference, 0.0703, 1e-4);
  const tNone = judge({ ...base, method: 'welch-t', df: 6, estimate: 0, lower: -2.447, upper: 2.447 }, 'lower-is-better');
  // With 6 df the critical values are t_0.975 = 2.447 and t_0.8 = 0.906: SE 1, MDD 3.353.
  if (tNone.verdict === 'no detectable difference') near(tNone.minimumDetectableDifference, 3.353, 2e-3);
  const open = judge({ ...base, estimate: 0, lower: -1, upper: Infinity }, 'lower-is-better');
  assert.deepEqual(open, { verdict: 'no detectable difference', minimumDetectableDifference: Infinity });
});

test('measured coverage of Newcombe, MOVER-Garwood and Welch intervals is near 95 %', (t) => {
  const reps = 2000;
  const newcombe = coverage(
    reps,
    1,
    (rng) => newcombeDifference({ successes: rng.binomial(300, 0.12), trials: 300 }, { successes: rng.binomial(250, 0.08), trials: 250 }),
    0.04,
  );
  const mover = coverage(
    reps,
    2,
    (rng) => rateDifference({ events: rng.poisson(12), exposure: 40_000 }, { events: rng.poisson(6), exposure: 30_000 }),
    3 - 2,
  );
  const welch = coverage(
    reps,
    3,
    // Unequal spreads per arm, as runs of two builds under different load: the case Welch's df is for.
    (rng) =>
      welchDifference(
        Array.from({ length: 7 }, () => 100 + 2 * rng.normal()),
        Array.from({ length: 7 }, () => 98 + 6 * rng.normal()),
      ),
    2,
  );
  t.diagnostic(`coverage over ${reps} seeded repetitions: Newcombe ${newcombe}, MOVER-Garwood ${mover}, Welch ${welch}`);
  for (const [name, c] of [
    ['Newcombe', newcombe],
    ['MOVER-Garwood', mover],
    ['Welch', welch],
  ] as const) {
    assert.ok(c >= 0.93 && c <= 0.97, `${name} coverage ${c}`);
  }
});
