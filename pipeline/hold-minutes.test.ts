import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planHoldMinuteStatements, type HoldMinute } from './hold-minutes.ts';

const at = (minutes: number, cluster = 'c1'): HoldMinute => [
  cluster,
  new Date(Date.UTC(2026, 11, 4) + minutes * 60_000).toISOString().slice(0, 19).replace('T', ' '),
];

describe('hold minute statements', () => {
  it('sorts the pairs by minute and keeps neighbours in one statement', () => {
    assert.deepEqual(planHoldMinuteStatements([at(3), at(1, 'c2'), at(1), at(2)]), [[at(1), at(1, 'c2'), at(2), at(3)]]);
  });

  it('splits where minutes lie more than ten apart, so a replay of an old hour does not read every hour between', () => {
    assert.deepEqual(planHoldMinuteStatements([at(600), at(0), at(10), at(21)]), [[at(0), at(10)], [at(21)], [at(600)]]);
  });

  it('bounds a statement to two hours of minutes and to 1,000 pairs', () => {
    const day = Array.from({ length: 1440 }, (_, m) => at(m));
    const runs = planHoldMinuteStatements(day);
    assert.deepEqual(
      runs.map((r) => r.length),
      Array(12).fill(120),
    );
    const clusters = Array.from({ length: 2500 }, (_, i) => at(i % 5, `c${i}`));
    assert.deepEqual(
      planHoldMinuteStatements(clusters).map((r) => r.length),
      [1000, 1000, 500],
    );
  });

  it('plans nothing for no pairs', () => {
    assert.deepEqual(planHoldMinuteStatements([]), []);
  });
});
