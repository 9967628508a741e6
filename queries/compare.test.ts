import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InputError } from '../common/index.ts';
import { newcombeDifference } from './analysis/index.ts';
import { parseCompareRequest, parseSelectorText } from './compare-selector.ts';
import { compareSummaries, peakPinnedInStorms, type ArmSummary, type MetricComparison } from './compare.ts';
import type { PinnedRow } from './distribution.ts';
import { flagThresholdsSchema } from './flag-model.ts';
import { DEFAULT_READ_LIMITS } from './read-window.ts';

const NOW = Date.parse('2026-12-01T12:00:00Z');
const parse = (pairs: Record<string, string>) => parseCompareRequest(pairs, DEFAULT_READ_LIMITS, () => NOW);
const refused = (pairs: Record<string, string>, message: RegExp) =>
  assert.throws(
    () => parse(pairs),
    (e: unknown) => e instanceof InputError && message.test(e.message),
  );

describe('compare selectors', () => {
  it('version A against version B over the same hour: shared keys from both., each arm its own filter', () => {
    const r = parse({ 'both.cluster': 'prod', 'both.from': '-1h', 'baseline.decode_version': 'v1', 'candidate.decode_version': 'v2' });
    assert.deepEqual(r.baseline.filters, { cluster: 'prod', decode_version: 'v1' });
    assert.deepEqual(r.candidate.filters, { cluster: 'prod', decode_version: 'v2' });
    for (const arm of [r.baseline, r.candidate]) {
      assert.equal(arm.from, '2026-12-01T11:00:00.000Z');
      assert.equal(arm.to, '2026-12-01T12:00:00.000Z');
    }
  });

  it("an arm's own key overrides both., and ISO times work beside relative ones", () => {
    const r = parse({
      'both.backend': 'nixl',
      'candidate.backend': 'mooncake',
      'baseline.from': '2026-12-01T09:00:00Z',
      'baseline.to': '-2h',
    });
    assert.equal(r.baseline.filters.backend, 'nixl');
    assert.equal(r.candidate.filters.backend, 'mooncake');
    assert.equal(r.baseline.from, '2026-12-01T09:00:00.000Z');
    assert.equal(r.baseline.to, '2026-12-01T10:00:00.000Z');
  });

  it('the hour before a rollout against the hour after it, and a given window', () => {
    const r = parse({ rollout_at: '2026-12-01T10:00:00Z', 'both.decode_engine': 'decode-0' });
    assert.deepEqual([r.baseline.from, r.baseline.to], ['2026-12-01T09:00:00.000Z', '2026-12-01T10:00:00.000Z']);
    assert.deepEqual([r.candidate.from, r.candidate.to], ['2026-12-01T10:00:00.000Z', '2026-12-01T11:00:00.000Z']);
    assert.equal(r.candidate.filters.decode_engine, 'decode-0');
    const short = parse({ rollout_at: '-1h', window: '30m' });
    assert.deepEqual([short.baseline.from, short.candidate.to], ['2026-12-01T10:30:00.000Z', '2026-12-01T11:30:00.000Z']);
  });

  it('refuses unknown keys naming them, and windows that are not windows', () => {
    refused({ 'baseline.decode_verison': 'v1' }, /unknown parameter "baseline\.decode_verison"/);
    refused({ from: '-1h' }, /unknown parameter "from"/);
    refused({ 'arm.cluster': 'x' }, /unknown parameter "arm\.cluster"/);
    refused({ rollout_at: '-1h', 'candidate.to': 'now' }, /candidate\.to: not with rollout_at/);
    refused({ window: '1h' }, /window: only with rollout_at/);
    refused({ rollout_at: '-1h', window: 'an hour' }, /window: expected a duration/);
    refused({ 'baseline.from': '-1x' }, /baseline\.from: expected an ISO 8601 time or a time relative/);
    refused({ 'candidate.from': '-1h', 'candidate.to': '-2h' }, /candidate\.to must be after candidate\.from/);
    refused({ 'baseline.from': '-8d' }, /baseline\.from\.\.baseline\.to covers 8 days; a read may cover at most 7 days/);
    refused({ rollout_at: 'now', window: '8d' }, /rollout_at - window\.\.rollout_at covers 8 days/);
  });

  it('reads the CLI text form into pairs', () => {
    assert.deepEqual(parseSelectorText('  decode_version=v1   from=-2h ', '--baseline'), { decode_version: 'v1', from: '-2h' });
    assert.throws(() => parseSelectorText('decode_version v1', '--baseline'), /--baseline: expected key=value/);
    assert.throws(() => parseSelectorText('from=-1h from=-2h', '--both'), /--both: from is given twice/);
  });
});

const arm = (over: Partial<ArmSummary> = {}): ArmSummary => ({
  holds: 1000,
  drained: 980,
  timeouts: 10,
  open: 10,
  lateWrites: 0,
  unsafeReleases: 0,
  tails: 1000,
  drainSample: [],
  tailSample: [],
  peakPinnedShare: 0.2,
  stormWindows: 1,
  ...over,
});
const names = { baseline: 'decode_version=v1', candidate: 'decode_version=v2' };
const metric = (metrics: MetricComparison[], name: string) => metrics.find((m) => m.metric === name) as MetricComparison;
/** n values of a known spread, shifted: a sample whose quantiles differ by `shift` from the unshifted one. */
const spread = (n: number, shift = 0) => Array.from({ length: n }, (_, i) => 10 + shift + ((i * 7919) % n) / 10);

describe('compare metrics on hand-made summaries', () => {
  it('more timeouts in the candidate are worse, with the Newcombe interval itself', () => {
    const b = arm({ drained: 990, timeouts: 10 });
    const c = arm({ drained: 810, timeouts: 190 });
    const m = metric(compareSummaries({ baseline: b, candidate: c }, names), 'timeout_share');
    const expected = newcombeDifference({ successes: 190, trials: 1000 }, { successes: 10, trials: 1000 });
    assert.equal(m.verdict, 'worse');
    assert.equal(m.method, 'newcombe-hybrid-score');
    assert.deepEqual([m.baseline, m.candidate], [0.01, 0.19]);
    assert.deepEqual([m.interval?.lower, m.interval?.upper], [expected.lower, expected.upper]);
    assert.ok(m.interval && m.interval.lower > 0 && m.interval.lower < 0.18 && m.interval.upper > 0.18);
    // And the same pair the other way round is better.
    assert.equal(metric(compareSummaries({ baseline: c, candidate: b }, names), 'timeout_share').verdict, 'better');
  });

  it('identical arms: no detectable difference with a finite minimum detectable difference on every interval', () => {
    const same = arm({ drainSample: spread(2000), tailSample: spread(2000), lateWrites: 3, unsafeReleases: 1 });
    const metrics = compareSummaries({ baseline: same, candidate: same }, names);
    for (const m of metrics.filter((x) => x.interval)) {
      assert.equal(m.verdict, 'no detectable difference', m.metric);
      assert.ok(Number.isFinite(m.minimumDetectableDifference) && (m.minimumDetectableDifference as number) > 0, m.metric);
    }
    assert.deepEqual(
      metrics.filter((m) => m.interval).map((m) => m.metric),
      [
        'timeout_share',
        'open_share',
        'drain_p50_ms',
        'drain_p90_ms',
        'drain_p99_ms',
        'tail_p50_ms',
        'tail_p90_ms',
        'tail_p99_ms',
        'late_writes_per_10k_holds',
        'unsafe_releases_per_10k_holds',
      ],
    );
  });

  it('quantiles and rates: a slower, leakier candidate is worse, each by its own method', () => {
    const b = arm({ drainSample: spread(2000), tailSample: spread(2000), lateWrites: 0, unsafeReleases: 0 });
    const c = arm({ drainSample: spread(2000, 50), tailSample: spread(2000), lateWrites: 30, unsafeReleases: 12 });
    const metrics = compareSummaries({ baseline: b, candidate: c }, names);
    const p50 = metric(metrics, 'drain_p50_ms');
    assert.equal(p50.verdict, 'worse');
    assert.equal(p50.method, 'mover-order-statistic');
    assert.ok(Math.abs((p50.difference as number) - 50) < 1e-9, `p50 difference ${p50.difference}`);
    assert.equal(metric(metrics, 'tail_p90_ms').verdict, 'no detectable difference');
    const late = metric(metrics, 'late_writes_per_10k_holds');
    assert.deepEqual([late.baseline, late.candidate, late.method, late.verdict], [0, 300, 'mover-garwood', 'worse']);
    assert.equal(metric(metrics, 'unsafe_releases_per_10k_holds').verdict, 'worse');
  });

  it('the storm peak has a difference but no interval, and says so', () => {
    const m = metric(
      compareSummaries({ baseline: arm({ peakPinnedShare: 0.25 }), candidate: arm({ peakPinnedShare: 0.75 }) }, names),
      'peak_pinned_share_in_storms',
    );
    assert.deepEqual([m.baseline, m.candidate, m.difference, m.interval, m.verdict], [0.25, 0.75, 0.5, null, null]);
    assert.equal(m.note, 'no interval (one peak per arm)');
    const none = metric(
      compareSummaries({ baseline: arm({ peakPinnedShare: null }), candidate: arm() }, names),
      'peak_pinned_share_in_storms',
    );
    assert.match(none.note ?? '', /^no abort storm in baseline \(decode_version=v1\); no interval/);
  });

  it('an arm without holds: every metric says so by its selector, and no value is NaN', () => {
    const empty = arm({ holds: 0, drained: 0, timeouts: 0, open: 0, tails: 0, peakPinnedShare: null, stormWindows: 0 });
    const metrics = compareSummaries({ baseline: arm({ drainSample: spread(100), tailSample: spread(100) }), candidate: empty }, names);
    assert.deepEqual(metric(metrics, 'holds').candidate, 0);
    for (const m of metrics.filter((x) => x.metric !== 'holds' && x.metric !== 'peak_pinned_share_in_storms')) {
      assert.equal(m.note, 'no holds in candidate (decode_version=v2)', m.metric);
      assert.deepEqual([m.candidate, m.difference, m.interval, m.verdict], [null, null, null, null], m.metric);
    }
    const numbers = JSON.stringify(metrics, (_k, v: unknown) => (typeof v === 'number' && Number.isNaN(v) ? 'NaN' : v));
    assert.doesNotMatch(numbers, /NaN/);
  });

  it('too few values for p99: the interval is unbounded on a side, and the verdict cannot claim a difference', () => {
    const b = arm({ drainSample: spread(20), tailSample: spread(20) });
    const m = metric(compareSummaries({ baseline: b, candidate: b }, names), 'drain_p99_ms');
    assert.equal(m.interval?.upper, Infinity);
    assert.equal(m.verdict, 'no detectable difference');
    assert.equal(m.minimumDetectableDifference, Infinity);
    assert.match(m.note ?? '', /unbounded/);
  });
});

describe('peak KV pinned share in storms', () => {
  const thresholds = flagThresholdsSchema.parse({});
  const from = Date.parse('2026-12-01T11:00:00Z');
  /** One engine's windows: a quiet minute of 1 abort per 10 s before and through the range, and one storm window. */
  function engineRows(engine: string, stormAt: number, stormPinned: number): PinnedRow[] {
    const rows: PinnedRow[] = [];
    for (let t = from - 600_000; t < from + 600_000; t += 10_000) {
      const storm = t === stormAt;
      rows.push({
        cluster: 'c',
        decode_engine: engine,
        window_start: new Date(t).toISOString(),
        aborts: storm ? 20 : 1,
        peak_pinned_slots: storm ? stormPinned : 100,
        capacity_slots: 1000,
        engine_since: new Date(from - 900_000).toISOString(),
      });
    }
    return rows;
  }

  it("takes the storm windows of the arm's engines only, by the one storm rule", () => {
    const rows = [...engineRows('decode-0', from + 200_000, 600), ...engineRows('decode-9', from + 100_000, 990)];
    assert.deepEqual(peakPinnedInStorms(rows, new Set([JSON.stringify(['c', 'decode-0'])]), from, thresholds), {
      share: 0.6,
      stormWindows: 1,
    });
    assert.deepEqual(peakPinnedInStorms(rows, new Set([JSON.stringify(['c', 'decode-1'])]), from, thresholds), {
      share: null,
      stormWindows: 0,
    });
    // A storm before the range is not the arm's.
    const before = engineRows('decode-0', from - 100_000, 700);
    assert.deepEqual(peakPinnedInStorms(before, new Set([JSON.stringify(['c', 'decode-0'])]), from, thresholds), {
      share: null,
      stormWindows: 0,
    });
  });
});
