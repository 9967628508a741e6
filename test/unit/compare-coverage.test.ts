import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import type { LifecycleTruth, SimConfig } from '../../emitter/index.ts';
import { compareSummaries, type ArmSummary, type MetricComparison, type MetricName } from '../../queries/compare.ts';
import { abortHeavyArm } from '../support/arm-config.ts';
import { armSummaryFromTruth, simulateTruth } from '../support/arm-from-truth.ts';

/**
 * The intervals of `holdscope compare` measured over seeded repetitions of the simulator, each arm's summary built from
 * its truth (test/support/arm-from-truth.ts) and compared by compare.ts's own assembly, so every metric goes through
 * the code that answers /api/compare. One arm: the steady scenario cut to 1,000 requests with half of them aborted
 * (about 400 holds), a 1 s hold timeout and a Pareto transfer tail so that some writes outlive it (late writes and
 * unsafe releases to count), and `ackLoss` of acks lost. The 220 arms take about 30 s of CPU.
 */
const armConfig =
  (ackLoss: number) =>
  (c: SimConfig): void => {
    abortHeavyArm(c, { requests: 1000, ackLoss, holdTimeoutMs: 1000 });
    c.transfer.tailProbability = 0.05;
    c.transfer.tailScaleMs = 100;
    c.transfer.tailAlpha = 1.2;
  };

const PAIRS = 100;
const WORSE_SEEDS = 20;
const LOSS = 0.1;

/** The metrics whose "no detectable difference" count is printed; timeout share is the one the issue bounds. */
const COUNTED: MetricName[] = [
  'timeout_share',
  'open_share',
  'drain_p50_ms',
  'drain_p90_ms',
  'tail_p50_ms',
  'tail_p90_ms',
  'late_writes_per_10k_holds',
  'unsafe_releases_per_10k_holds',
];

const metric = (metrics: MetricComparison[], name: MetricName) => metrics.find((m) => m.metric === name) as MetricComparison;
const compare = (baseline: ArmSummary, candidate: ArmSummary) =>
  compareSummaries({ baseline, candidate }, { baseline: 'baseline', candidate: 'candidate' });
const metricsJudged = (pair: { baseline: ArmSummary; candidate: ArmSummary } | undefined) =>
  pair ? compare(pair.baseline, pair.candidate).filter((m) => m.verdict !== null).length : 0;

/** Timeouts among resolved holds, pooled over runs of one config: an estimate of the config's expected share. */
function pooledTimeoutShare(arms: ArmSummary[]): number {
  const timeouts = arms.reduce((sum, a) => sum + a.timeouts, 0);
  return timeouts / arms.reduce((sum, a) => sum + a.drained + a.timeouts, 0);
}

describe('compare intervals over seeded repetitions of the simulator', { timeout: 240_000 }, () => {
  // Pair i: two runs of the lossy config, seeds 10,000 + 2i and 10,001 + 2i. The lossless baselines of the 'worse'
  // check have seeds of their own; its candidates are the first pairs' candidates.
  let pairs: { baseline: ArmSummary; candidate: ArmSummary }[] = [];
  let lossless: ArmSummary[] = [];
  const arm = (seed: number, ackLoss: number): ArmSummary => {
    const truth: LifecycleTruth[] = simulateTruth('steady', seed, armConfig(ackLoss));
    return armSummaryFromTruth(truth, seed);
  };

  before(() => {
    pairs = Array.from({ length: PAIRS }, (_, i) => ({ baseline: arm(10_000 + 2 * i, LOSS), candidate: arm(10_001 + 2 * i, LOSS) }));
    lossless = Array.from({ length: WORSE_SEEDS }, (_, i) => arm(20_000 + i, 0));
  });

  it(`two identical arms give no detectable difference on timeout share in at least 93 of ${PAIRS} seeds`, (t) => {
    const counts = new Map<MetricName, { none: number; judged: number }>(COUNTED.map((m) => [m, { none: 0, judged: 0 }]));
    const mdd: number[] = [];
    // Pairs with a 'better' or 'worse' on any metric: what reading every row of one comparison risks.
    let anyVerdict = 0;
    for (const { baseline, candidate } of pairs) {
      const metrics = compare(baseline, candidate);
      if (metrics.some((m) => m.verdict === 'better' || m.verdict === 'worse')) anyVerdict++;
      for (const name of COUNTED) {
        const m = metric(metrics, name);
        const c = counts.get(name) as { none: number; judged: number };
        if (m.verdict === null) continue;
        c.judged++;
        if (m.verdict === 'no detectable difference') c.none++;
      }
      mdd.push(metric(metrics, 'timeout_share').minimumDetectableDifference ?? NaN);
    }
    const holds = pairs.map((p) => p.baseline.holds);
    t.diagnostic(
      `arms of ${Math.min(...holds)}-${Math.max(...holds)} holds, timeout share ${pooledTimeoutShare(pairs.map((p) => p.baseline)).toFixed(4)}`,
    );
    for (const [name, c] of counts) t.diagnostic(`${name}: no detectable difference in ${c.none} of ${c.judged} pairs`);
    t.diagnostic(`better or worse on at least one of the ${metricsJudged(pairs[0])} judged metrics: ${anyVerdict} of ${PAIRS} pairs`);
    const sorted = mdd.filter(Number.isFinite).sort((a, b) => a - b);
    t.diagnostic(`timeout share: median minimum detectable difference ${(sorted[Math.floor(sorted.length / 2)] as number).toFixed(4)}`);
    const share = counts.get('timeout_share') as { none: number; judged: number };
    assert.equal(share.judged, PAIRS, 'every pair has resolved holds in both arms');
    assert.ok(share.none >= 93, `timeout share: no detectable difference in ${share.none} of ${PAIRS}`);
    // The other metrics are printed, not bounded: 100 pairs tell 95 % from 90 % only roughly.
    for (const name of COUNTED) assert.equal((counts.get(name) as { judged: number }).judged, PAIRS, `${name} judged in every pair`);
  });

  it(`a candidate losing ${LOSS * 100} % of acks is worse on timeout share, its interval covering the expected difference`, (t) => {
    // The expected difference of the two configs, from every run of each (200 lossy arms, 20 lossless ones): its own
    // standard error, about 0.003, is a twentieth of the intervals' half-width.
    const expected = pooledTimeoutShare(pairs.flatMap((p) => [p.baseline, p.candidate])) - pooledTimeoutShare(lossless);
    let worse = 0;
    let covered = 0;
    for (const [i, baseline] of lossless.entries()) {
      const m = metric(compare(baseline, (pairs[i] as { candidate: ArmSummary }).candidate), 'timeout_share');
      const interval = m.interval as NonNullable<MetricComparison['interval']>;
      if (m.verdict === 'worse') worse++;
      if (interval.lower <= expected && expected <= interval.upper) covered++;
    }
    t.diagnostic(`lossless timeout share ${pooledTimeoutShare(lossless).toFixed(4)} (holds timed out by the transfer tail alone)`);
    t.diagnostic(
      `expected difference ${expected.toFixed(4)}; worse in ${worse} of ${WORSE_SEEDS} seeds, interval covering it in ${covered}`,
    );
    assert.ok(expected > 0.05, `the ack loss raises the timeout share (${expected})`);
    assert.ok(worse >= WORSE_SEEDS - 1, `worse in ${worse} of ${WORSE_SEEDS}`);
    // At 95 % coverage, 17 or more of 20 in 98 % of such experiments.
    assert.ok(covered >= 17, `the interval covers the expected difference in ${covered} of ${WORSE_SEEDS}`);
  });
});
