import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { wilsonLowerBound } from '../../queries/distribution.ts';

describe('Wilson lower bound', () => {
  it('matches the textbook values', () => {
    // 95% interval for 10 of 100: [0.0552, 0.1744].
    assert.equal(wilsonLowerBound(10, 100).toFixed(4), '0.0552');
    assert.equal(wilsonLowerBound(0, 50), 0);
    assert.equal(wilsonLowerBound(0, 0), 0);
  });

  it('does not call a handful of timeouts heavy', () => {
    // 2 of 3 holds timing out is 67%, but the bound stays low: too few samples to judge.
    assert.ok(wilsonLowerBound(2, 3) < 0.25);
    assert.ok(wilsonLowerBound(200, 300) > 0.6);
  });
});
