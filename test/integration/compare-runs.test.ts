// Experiment arms compared across their runs, against the simulator's ground truth: engines labelled with
// pd.experiment.arm and pd.experiment.run, three runs per arm through the real collector and writer into embedded
// ClickHouse, then `compareArms` with `arm` selectors, as `holdscope compare --baseline arm=... --candidate arm=...`.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import type { LifecycleTruth, SimConfig } from '../../emitter/index.ts';
import { compareArms, DEFAULT_READ_LIMITS, parseCompareRequest, type MetricComparison } from '../../queries/index.ts';
import { abortHeavyArm } from '../support/arm-config.ts';
import { loadScenario } from '../support/load.ts';
import { randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const RUNS = ['run-1', 'run-2', 'run-3'];

/** One run of an arm: its own decode engines (a deployment), labelled with the arm and run; `ackLoss` per ack. */
const runConfig =
  (arm: string, run: string, ackLoss: number) =>
  (c: SimConfig): void => {
    abortHeavyArm(c, { requests: 600, ackLoss, holdTimeoutMs: 2000 });
    c.decode = c.decode.map((d, i) => ({ ...d, id: `${arm}-${run}-decode-${i}` }));
    c.experiment = { arm, run };
  };

const resolvedHolds = (truth: LifecycleTruth[]) => truth.filter((t) => t.resolution === 'drained' || t.resolution === 'timeout');
const timeoutShare = (truth: LifecycleTruth[]) => {
  const resolved = resolvedHolds(truth);
  return resolved.filter((t) => t.resolution === 'timeout').length / resolved.length;
};

describe('experiment arms compared across their runs (chdb embedded)', { timeout: 180_000 }, () => {
  let client: ClickHouseClient;
  const database = randomDatabase('compare_runs');
  const at = Date.now() - 3_600_000;
  const truth: Record<string, LifecycleTruth[]> = {};

  before(async () => {
    client = await embeddedClickHouse();
    for (const [arm, ackLoss, seed] of [
      ['baseline', 0, 300],
      ['candidate', 0.1, 400],
    ] as const) {
      for (const [i, run] of RUNS.entries()) {
        const summary = await loadScenario(client, database, 'steady', seed + i, runConfig(arm, run, ackLoss), at);
        truth[`${arm}/${run}`] = summary.truth;
      }
    }
  });
  after(() => client?.close());

  it('reads each run of each arm as the simulator ran it, and judges the lossy arm worse across runs', async (t) => {
    const pairs = {
      'both.from': new Date(at - 60_000).toISOString(),
      'both.to': new Date(at + 600_000).toISOString(),
      'baseline.arm': 'baseline',
      'candidate.arm': 'candidate',
    };
    const report = await compareArms(client, database, parseCompareRequest(pairs, DEFAULT_READ_LIMITS));
    const across = report.acrossRuns;
    assert.ok(across, 'both arms name an experiment arm: the runs are compared');
    for (const arm of ['baseline', 'candidate'] as const) {
      assert.deepEqual(
        across.runs[arm].map((r) => [r.run, r.holds, r.timeouts]),
        RUNS.map((run) => {
          const runTruth = truth[`${arm}/${run}`] as LifecycleTruth[];
          const holds = runTruth.filter((h) => h.resolution !== 'none');
          return [run, holds.length, holds.filter((h) => h.resolution === 'timeout').length];
        }),
        `${arm}: each run's holds and timeouts as the simulator decided them`,
      );
    }
    const share = across.metrics.find((m) => m.metric === 'timeout_share') as MetricComparison;
    const trueMeans = (arm: string) =>
      RUNS.reduce((sum, run) => sum + timeoutShare(truth[`${arm}/${run}`] as LifecycleTruth[]), 0) / RUNS.length;
    t.diagnostic(
      `timeout share, mean of runs: ${share.baseline?.toFixed(4)} -> ${share.candidate?.toFixed(4)}, difference ${share.difference?.toFixed(4)} ` +
        `[${share.interval?.lower.toFixed(4)}, ${share.interval?.upper.toFixed(4)}] ${share.verdict} (${share.method})`,
    );
    assert.equal(share.method, 'welch-t');
    assert.ok(Math.abs((share.difference as number) - (trueMeans('candidate') - trueMeans('baseline'))) < 1e-9, 'the runs are the truth');
    assert.equal(share.verdict, 'worse');
    // The holds pooled are judged too, and say the same.
    assert.equal(report.metrics.find((m) => m.metric === 'timeout_share')?.verdict, 'worse');
  });

  it('one run of an arm is a selector like any other, and leaves no comparison across runs', async () => {
    const pairs = {
      'both.from': new Date(at - 60_000).toISOString(),
      'both.to': new Date(at + 600_000).toISOString(),
      'baseline.arm': 'baseline',
      'baseline.run': 'run-1',
      'candidate.arm': 'baseline',
      'candidate.run': 'run-2',
    };
    const report = await compareArms(client, database, parseCompareRequest(pairs, DEFAULT_READ_LIMITS));
    assert.equal(report.acrossRuns, undefined);
    const holdsOf = (run: string) => (truth[`baseline/${run}`] as LifecycleTruth[]).filter((h) => h.resolution !== 'none').length;
    assert.deepEqual([report.baseline.summary.holds, report.candidate.summary.holds], [holdsOf('run-1'), holdsOf('run-2')]);
  });
});
