import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareRuns, comparesRuns, type RunRow } from './compare-runs.ts';
import { parseCompareRequest } from './compare-selector.ts';

const run = (name: string, timeouts: number, drained: number, tailP50: number | null = 100): RunRow => ({
  run: name,
  holds: timeouts + drained,
  drained,
  timeouts,
  open: 0,
  late_writes: 0,
  unsafe_releases: 0,
  drain_p50_ms: 50,
  drain_p90_ms: 90,
  tail_p50_ms: tailP50,
  tail_p90_ms: tailP50 === null ? null : tailP50 * 2,
});

const metric = (metrics: ReturnType<typeof compareRuns>, name: string) => metrics.find((m) => m.metric === name)!;

describe('arms compared across their runs', () => {
  it('judges the timeout share by the runs: worse when every candidate run is worse than every baseline run', () => {
    const metrics = compareRuns({
      baseline: [run('b1', 10, 90), run('b2', 12, 88), run('b3', 9, 91)],
      candidate: [run('c1', 30, 70), run('c2', 28, 72), run('c3', 33, 67)],
    });
    const share = metric(metrics, 'timeout_share');
    assert.equal(share.method, 'welch-t');
    assert.equal(share.verdict, 'worse');
    assert.ok(Math.abs((share.difference as number) - (0.3033 - 0.1033)) < 1e-3, String(share.difference));
    assert.ok(share.interval!.lower > 0 && share.interval!.upper < 0.4, JSON.stringify(share.interval));
  });

  it('says no detectable difference when the runs overlap, and how large a difference they could have shown', () => {
    const metrics = compareRuns({
      baseline: [run('b1', 10, 90), run('b2', 25, 75), run('b3', 15, 85)],
      candidate: [run('c1', 12, 88), run('c2', 22, 78), run('c3', 18, 82)],
    });
    const share = metric(metrics, 'timeout_share');
    assert.equal(share.verdict, 'no detectable difference');
    assert.ok((share.minimumDetectableDifference as number) > 0.05, String(share.minimumDetectableDifference));
  });

  it('refuses to judge an arm with fewer than two runs with a value, and names it', () => {
    const metrics = compareRuns({ baseline: [run('b1', 10, 90)], candidate: [run('c1', 30, 70), run('c2', 28, 72)] });
    const share = metric(metrics, 'timeout_share');
    assert.equal(share.verdict, null);
    assert.match(share.note ?? '', /fewer than 2 runs with a value in baseline/);
    const tails = compareRuns({
      baseline: [run('b1', 10, 90, null), run('b2', 10, 90, null)],
      candidate: [run('c1', 30, 70), run('c2', 28, 72)],
    });
    assert.match(metric(tails, 'tail_p50_ms').note ?? '', /in baseline/);
  });

  it('compares runs only when both arms name an experiment arm and no single run', () => {
    const now = Date.parse('2026-12-06T12:00:00Z');
    const parse = (pairs: Record<string, string>) => parseCompareRequest(pairs, { maxReadWindowMs: 7 * 86_400_000 }, () => now);
    const both = parse({ 'both.from': '-1h', 'baseline.arm': 'baseline', 'candidate.arm': 'fix' });
    assert.equal(comparesRuns(both.baseline, both.candidate), true);
    const oneRun = parse({ 'both.from': '-1h', 'baseline.arm': 'baseline', 'candidate.arm': 'fix', 'candidate.run': 'run-3' });
    assert.equal(comparesRuns(oneRun.baseline, oneRun.candidate), false);
    const noArms = parse({ 'both.from': '-1h', 'baseline.decode_version': 'v1', 'candidate.decode_version': 'v2' });
    assert.equal(comparesRuns(noArms.baseline, noArms.candidate), false);
  });
});
