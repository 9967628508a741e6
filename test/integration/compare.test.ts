import assert from 'node:assert/strict';
import diagnostics from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import type { LifecycleTruth, SimConfig } from '../../emitter/index.ts';
import {
  compareArms,
  DEFAULT_READ_LIMITS,
  parseCompareRequest,
  QUERY_CHANNEL,
  type ComparisonReport,
  type QueryFinished,
  type MetricComparison,
} from '../../queries/index.ts';
import { abortHeavyArm } from '../support/arm-config.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

/**
 * One arm's traffic: the steady scenario with many aborts (about 400 holds), a 2 s hold timeout so timed-out holds
 * resolve within the run, and its own decode engines and version. `ackLoss` is the share of acks lost, per ack.
 */
const armConfig =
  (version: string, engines: string, ackLoss: number) =>
  (c: SimConfig): void => {
    abortHeavyArm(c, { requests: 1200, ackLoss, holdTimeoutMs: 2000 });
    c.decode = c.decode.map((d, i) => ({ ...d, id: `${engines}-${i}`, version }));
  };

/** The true timeout share of a run: timeouts among its resolved holds, as the simulator decided them. */
function trueTimeoutShare(truth: LifecycleTruth[]): { share: number; holds: number; timeouts: number } {
  const resolved = truth.filter((t) => t.resolution === 'drained' || t.resolution === 'timeout');
  const timeouts = resolved.filter((t) => t.resolution === 'timeout').length;
  return { share: timeouts / resolved.length, holds: truth.filter((t) => t.resolution !== 'none').length, timeouts };
}

/**
 * The timeout share the run's process would give on average: a hold times out when any of its expected ranks' acks is
 * lost, each with probability `ackLoss` (nothing else times a hold out here: the run without loss has no timeouts). The
 * realized share is the interval's estimate itself; this is what the interval is for.
 */
function expectedTimeoutShare(truth: LifecycleTruth[], ackLoss: number): number {
  const resolved = truth.filter((t) => t.resolution === 'drained' || t.resolution === 'timeout');
  return resolved.reduce((sum, t) => sum + 1 - (1 - ackLoss) ** t.expected_ranks.length, 0) / resolved.length;
}

const metric = (report: Pick<ComparisonReport, 'metrics'>, name: string) =>
  report.metrics.find((m) => m.metric === name) as MetricComparison;
const iso = (ms: number) => new Date(ms).toISOString();

/** `run`'s result and the names of the queries it ran, in the order they ended. */
async function queriesOf<T>(run: () => Promise<T>): Promise<{ result: T; queries: string[] }> {
  const queries: string[] = [];
  const listen = (message: unknown) => void queries.push((message as QueryFinished).name);
  diagnostics.subscribe(QUERY_CHANNEL, listen);
  try {
    return { result: await run(), queries };
  } finally {
    diagnostics.unsubscribe(QUERY_CHANNEL, listen);
  }
}
const countOf = (names: string[], name: string) => names.filter((n) => n === name).length;
const describeInterval = (m: MetricComparison) =>
  `${m.metric}: ${m.baseline?.toFixed(4)} -> ${m.candidate?.toFixed(4)}, difference ${m.difference?.toFixed(4)} [${m.interval?.lower.toFixed(4)}, ${m.interval?.upper.toFixed(4)}] ${m.verdict}` +
  (m.minimumDetectableDifference === undefined ? '' : ` (MDD ${m.minimumDetectableDifference.toFixed(4)})`);

describe('holdscope compare against the simulator ground truth (chdb embedded)', { timeout: 120_000 }, () => {
  let client: ClickHouseClient;
  const database = randomDatabase('compare');
  // Version A against version B over the same window: v2's engines lose 10 % of acks, v1's none.
  const sameWindowAt = Date.now() - 3_600_000;
  let truthV1: LifecycleTruth[] = [];
  let truthV2: LifecycleTruth[] = [];
  const versionPairs = {
    'both.from': iso(sameWindowAt - 60_000),
    'both.to': iso(sameWindowAt + 600_000),
    'baseline.decode_version': 'v1',
    'candidate.decode_version': 'v2',
  };

  before(async () => {
    client = await embeddedClickHouse();
    ({ truth: truthV1 } = await loadScenario(client, database, 'steady', 101, armConfig('v1', 'decode-a', 0), sameWindowAt));
    ({ truth: truthV2 } = await loadScenario(client, database, 'steady', 102, armConfig('v2', 'decode-b', 0.1), sameWindowAt));
  });
  after(() => client?.close());

  it('a candidate losing 10 % of acks is worse on timeout share, and its interval covers the true difference', async (t) => {
    const { result: report, queries } = await queriesOf(() =>
      compareArms(client, database, parseCompareRequest(versionPairs, DEFAULT_READ_LIMITS)),
    );
    // Arms over one window and cluster share its storm series: one kv_pinned read, not one per arm.
    assert.deepEqual([countOf(queries, 'compare_arm'), countOf(queries, 'kv_pinned')], [2, 1], queries.join(', '));
    const b = trueTimeoutShare(truthV1);
    const c = trueTimeoutShare(truthV2);
    const share = metric(report, 'timeout_share');
    t.diagnostic(`true timeout share ${b.share.toFixed(4)} (${b.holds} holds) -> ${c.share.toFixed(4)} (${c.holds} holds)`);
    t.diagnostic(`true difference ${(c.share - b.share).toFixed(4)}; measured ${describeInterval(share)}`);
    // The records are the truth's, hold for hold: the interval is then about sampling, not about lost data.
    assert.deepEqual([report.baseline.summary.holds, report.candidate.summary.holds], [b.holds, c.holds]);
    assert.deepEqual([report.baseline.summary.timeouts, report.candidate.summary.timeouts], [b.timeouts, c.timeouts]);
    assert.ok(b.holds >= 300 && c.holds >= 300, `enough holds per arm (${b.holds}, ${c.holds})`);
    assert.equal(share.verdict, 'worse');
    assert.equal(share.method, 'newcombe-hybrid-score');
    const interval = share.interval as NonNullable<MetricComparison['interval']>;
    const expected = expectedTimeoutShare(truthV2, 0.1) - expectedTimeoutShare(truthV1, 0);
    t.diagnostic(`expected difference from the ack loss ${expected.toFixed(4)}`);
    assert.equal(b.timeouts, 0, 'without ack loss no hold times out');
    assert.ok(interval.lower <= expected && expected <= interval.upper, 'the interval covers the true difference');
    // No storm in a 15 s run (an engine's storms are judged after its warm-up minute): said, not invented.
    assert.match(metric(report, 'peak_pinned_share_in_storms').note ?? '', /no abort storm in baseline .*no interval \(one peak per arm\)/);
    // Lost acks leave holds to the timeout: the candidate's drain times are its few drained holds', its p99 tail unchanged.
    assert.ok(report.candidate.summary.drainSampled === report.candidate.summary.drained);
  });

  it('two arms of one config and different seeds, the hour before a rollout and after it: no detectable difference', async (t) => {
    const rolloutAt = Date.now() - 2 * 3_600_000;
    const config = armConfig('v1', 'decode-r', 0.1);
    const { truth: before } = await loadScenario(client, database, 'steady', 201, config, rolloutAt - 300_000);
    const { truth: afterRollout } = await loadScenario(client, database, 'steady', 202, config, rolloutAt + 60_000);
    const request = parseCompareRequest({ rollout_at: iso(rolloutAt), window: '10m', 'both.decode_version': 'v1' }, DEFAULT_READ_LIMITS);
    const { result: report, queries } = await queriesOf(() => compareArms(client, database, request));
    assert.equal(countOf(queries, 'kv_pinned'), 2, 'arms over two windows read a storm series each');
    const b = trueTimeoutShare(before);
    const c = trueTimeoutShare(afterRollout);
    const share = metric(report, 'timeout_share');
    t.diagnostic(`true timeout share ${b.share.toFixed(4)} -> ${c.share.toFixed(4)}, difference ${(c.share - b.share).toFixed(4)}`);
    t.diagnostic(`measured ${describeInterval(share)}`);
    assert.deepEqual([report.baseline.summary.holds, report.candidate.summary.holds], [b.holds, c.holds]);
    assert.equal(share.verdict, 'no detectable difference');
    const mdd = share.minimumDetectableDifference as number;
    assert.ok(mdd > 0 && mdd < 0.1, `a 10-point change would have been found (MDD ${mdd})`);
    const interval = share.interval as NonNullable<MetricComparison['interval']>;
    const expected = expectedTimeoutShare(afterRollout, 0.1) - expectedTimeoutShare(before, 0.1);
    t.diagnostic(`expected difference ${expected.toFixed(4)}`);
    assert.ok(interval.lower <= expected && expected <= interval.upper, 'the interval covers the true difference');
  });

  it('/api/compare answers the same comparison, names an unknown key in a 400, and says which arm has no holds', async () => {
    const server = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    try {
      const base = `http://127.0.0.1:${server.port}/api/compare`;
      const ok = await fetch(`${base}?${new URLSearchParams(versionPairs)}`);
      assert.equal(ok.status, 200);
      const body = (await ok.json()) as ComparisonReport;
      const direct = await compareArms(client, database, parseCompareRequest(versionPairs, DEFAULT_READ_LIMITS));
      // Quantiles come from samples (seeded, but drawn by parallel threads): compare the exact metrics.
      for (const name of ['holds', 'timeout_share', 'open_share', 'late_writes_per_10k_holds', 'unsafe_releases_per_10k_holds'])
        assert.deepEqual(metric(body, name), metric(direct, name), name);
      assert.equal(body.sampleSize, 20_000);

      const unknown = await fetch(`${base}?baseline.decode_verison=v1`);
      assert.equal(unknown.status, 400);
      assert.match(((await unknown.json()) as { error: string }).error, /unknown parameter "baseline\.decode_verison"/);

      const empty = await fetch(`${base}?${new URLSearchParams({ ...versionPairs, 'candidate.decode_version': 'v9' })}`);
      assert.equal(empty.status, 200);
      const emptyBody = (await empty.json()) as ComparisonReport;
      assert.equal(metric(emptyBody, 'holds').candidate, 0);
      assert.match(metric(emptyBody, 'timeout_share').note ?? '', /^no holds in candidate \(decode_version=v9, /);
      assert.equal(metric(emptyBody, 'drain_p99_ms').difference, null);
    } finally {
      await server.close();
    }
  });
});
