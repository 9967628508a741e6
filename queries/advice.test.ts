import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InputError } from '../common/index.ts';
import {
  adviceWindow,
  DEFAULT_ADVICE_TARGET,
  groupAdvice,
  parseTarget,
  peakPinnedSlots,
  slotSecondsPerAbort,
  worstStorm,
  type AdviceTailRow,
  type StormHold,
} from './advice.ts';
import type { PinnedRow } from './distribution.ts';
import { flagThresholdsSchema } from './flag-model.ts';

const row = (over: Partial<AdviceTailRow> = {}): AdviceTailRow => ({
  cluster: 'c',
  prefill_version: 'p1',
  decode_version: 'd1',
  backend: 'mooncake',
  decode_engine: 'decode-0',
  holds: 0,
  open: 0,
  drained: 0,
  timeouts: 0,
  without_evidence: 0,
  unsafe_releases: 0,
  with_evidence: 0,
  timeout_common_ms: 30_000,
  timeout_max_ms: 30_000,
  capacity_slots: 1000,
  today_slot_seconds: null,
  tails_ms: [],
  holds_sample: [],
  ...over,
});

describe('hold-timeout advice: inputs', () => {
  it('takes a target in (0, 0.5) and refuses anything else as the caller’s error', () => {
    assert.equal(parseTarget(undefined), DEFAULT_ADVICE_TARGET);
    assert.equal(parseTarget('1e-3'), 1e-3);
    for (const bad of ['0', '0.5', '-1e-4', 'x', 'NaN', 'Infinity']) assert.throws(() => parseTarget(bad), InputError, bad);
  });

  it('reads a window relative to now, six hours by default, bounded by the max read window', () => {
    const now = Date.UTC(2026, 11, 6, 12);
    assert.deepEqual(adviceWindow(undefined, undefined, { maxReadWindowMs: 7 * 86_400_000 }, now), {
      from: '2026-12-06T06:00:00.000Z',
      to: '2026-12-06T12:00:00.000Z',
      fromMs: now - 6 * 3_600_000,
      toMs: now,
    });
    assert.equal(adviceWindow('-30m', 'now', { maxReadWindowMs: 86_400_000 }, now).fromMs, now - 1_800_000);
    assert.throws(() => adviceWindow('-2d', undefined, { maxReadWindowMs: 86_400_000 }, now), InputError);
    assert.throws(() => adviceWindow('-1h', '-2h', { maxReadWindowMs: 86_400_000 }, now), InputError);
  });
});

describe('hold-timeout advice: cost', () => {
  it('charges a drained hold until it drains or the timeout, any other hold the whole timeout', () => {
    // Drained after 200 ms with 10 slots, drained after 5 s with 20 slots, timed out with 30 slots, open with 40.
    const sample: [number, number, number][] = [
      [200, 10, 1],
      [5000, 20, 1],
      [30_000, 30, 0],
      [-1, 40, 0],
    ];
    // At 1 s: 10 × 0.2 + 20 × 1 + 30 × 1 + 40 × 1 = 92 slot-seconds over 4 holds.
    assert.equal(slotSecondsPerAbort(sample, 1000), 23);
    // At 10 s the second drains first: 2 + 100 + 300 + 400.
    assert.equal(slotSecondsPerAbort(sample, 10_000), 802 / 4);
    assert.equal(slotSecondsPerAbort([], 1000), null);
    assert.equal(slotSecondsPerAbort(sample, NaN), null);
  });

  it('pins a hold from the whole second after its start to the whole second of its end, as kv_pinned counts', () => {
    const t = 1_000_000_000_000; // a whole 10 s window's start
    const holds: StormHold[] = [
      // From t + 0.5 s to t + 3.2 s: seconds t+1 .. t+3.
      { hold_start_ms: t + 500, release_ms: t + 3200, resolution: 'drained', held_slots: 100 },
      // Timed out 30 s after starting 5 s before the window: pins the whole window, uncut.
      { hold_start_ms: t - 5000, release_ms: t + 25_000, resolution: 'timeout', held_slots: 50 },
      // Within one second: never pinned at a whole second.
      { hold_start_ms: t + 2100, release_ms: t + 2900, resolution: 'drained', held_slots: 1000 },
      // Open: to now.
      { hold_start_ms: t + 8000, release_ms: null, resolution: 'open', held_slots: 7 },
    ];
    assert.equal(peakPinnedSlots(holds, t, Infinity, t + 3_600_000), 150);
    // Cut at 2 s: the first ends at t + 2.5 s (second t+2), the second at t - 3 s (before the window), the open one at
    // t + 10 s (second t+10, the next window).
    assert.equal(peakPinnedSlots(holds, t, 2000, t + 3_600_000), 100);
    assert.equal(peakPinnedSlots(holds.slice(1, 2), t, 2000, t + 3_600_000), 0);
    assert.equal(peakPinnedSlots(holds.slice(3), t, 1000, t + 3_600_000), 7);
  });

  it('takes the storm window with the most aborts as the worst, past the warm-up', () => {
    const thresholds = flagThresholdsSchema.parse({});
    const from = Date.UTC(2026, 11, 6, 12);
    const at = (i: number) => new Date(from + i * 10_000).toISOString();
    const pinned = (i: number, aborts: number, peak: number): PinnedRow => ({
      cluster: 'c',
      decode_engine: 'decode-0',
      window_start: at(i),
      aborts,
      peak_pinned_slots: peak,
      capacity_slots: 1000,
      engine_since: at(-40),
    });
    const rows = [...Array.from({ length: 30 }, (_, i) => pinned(i, 4, 10)), pinned(30, 40, 300), pinned(31, 60, 200), pinned(32, 50, 900)];
    const worst = worstStorm(rows, from, thresholds);
    assert.equal(worst?.row.window_start, at(31));
    assert.equal(worstStorm(rows.slice(0, 30), from, thresholds), undefined);
  });
});

describe('hold-timeout advice: one group', () => {
  it('says too few holds rather than extrapolating from a handful', () => {
    const g = groupAdvice(row({ holds: 50, with_evidence: 50, tails_ms: Array.from({ length: 50 }, (_, i) => i * 3) }), 1e-4);
    assert.equal(g.advice.method, 'too-few');
    assert.match(g.summary, /^too few holds: 50 /);
    assert.equal(g.cost.slot_seconds_per_abort_at_advised, null);
  });

  it('advises from the sorted sample whatever order it came in, and notes holds without completion evidence', () => {
    const tails = Array.from({ length: 2000 }, (_, i) => 10 + ((i * 7919) % 2000) / 10);
    const g = groupAdvice(
      row({ holds: 2010, drained: 2000, timeouts: 10, without_evidence: 10, tails_ms: tails, holds_sample: [[100, 16, 1]] }),
      1e-3,
    );
    assert.equal(g.advice.method, 'tail-fit');
    assert.equal(g.sampled, 2000);
    if (g.advice.method === 'tail-fit') assert.ok(g.advice.lowerMs <= g.advice.timeoutMs && g.advice.timeoutMs <= g.advice.upperMs);
    assert.equal(g.cost.slot_seconds_per_abort_at_advised, 1.6);
    assert.equal(g.notes.length, 1);
    assert.match(g.notes[0] as string, /10 of 2010 resolved holds had a failed or timed-out write/);
  });
});
