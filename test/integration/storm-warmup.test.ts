import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import type { ClickHouseClient } from '../../common/index.ts';
import { coveredWindows } from '../../dashboards/lifecycle-metrics/kv.ts';
import { createLifecycleMetrics } from '../../dashboards/metrics.ts';
import { createRequestMetrics } from '../../dashboards/request-metrics.ts';
import {
  clickHouseTimeMs,
  computeFlags,
  firstStormWindow,
  flagThresholdsSchema,
  judgePinnedRows,
  pinnedRowsByEngine,
  runQuery,
  STORM_WINDOW_MS,
  stormReadParams,
  stormRuleOf,
  stormWindows,
  type PinnedRow,
} from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const thresholds = flagThresholdsSchema.parse({});
// The defaults: a warm-up of a minute of whole windows (stormWarmUpWindows), a median over up to 5 minutes.
const stormThresholds = thresholds;
const WINDOW_MS = 15 * 60_000;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** prom-client's own reading of its registry: every sample of every metric. */
async function samplesOf(registry: Registry): Promise<Sample[]> {
  const out: Sample[] = [];
  for (const m of await registry.getMetricsAsJSON()) {
    for (const v of m.values as { labels: Record<string, string | number>; value: number; metricName?: string }[])
      out.push({
        name: v.metricName ?? m.name,
        labels: Object.fromEntries(Object.entries(v.labels).map(([k, x]) => [k, String(x)])),
        value: v.value,
      });
  }
  return out;
}

const pick = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

/** The flag's own read of kv_pinned (queries/distribution.ts), judged by the flag's own function, per engine. */
async function flagJudgement(client: ClickHouseClient, database: string, fromMs: number, toMs: number, t = thresholds) {
  const rows = await runQuery<PinnedRow>(client, database, 'kv_pinned', {
    from: new Date(fromMs).toISOString(),
    to: new Date(toMs).toISOString(),
    cluster: '',
    with_aborts_only: '1',
    ...stormReadParams(t),
  });
  return { rows, verdicts: pinnedRowsByEngine(rows).map((engineRows) => judgePinnedRows(engineRows, fromMs, t)) };
}

describe('abort storms need a baseline: no verdict during the warm-up, a cold start is no storm, a storm is found', () => {
  let client: ClickHouseClient;
  let ackLossDb: string;
  let ackLossStart = 0;
  let stormDb: string;
  let stormStart = 0;
  const stormAtMs = 80_000;
  before(async () => {
    client = await embeddedClickHouse();
    ackLossDb = randomDatabase('warm');
    // ack-loss from a cold start: a steady 8 aborts a window on each decode engine from its first second, for 40 s.
    const ackLoss = await loadScenario(
      client,
      ackLossDb,
      'ack-loss',
      21,
      (c) => {
        c.rate = 100;
        c.requests = 4000;
        c.durationMs = 40_000;
        c.aborts.probability = 0.16;
      },
      Date.now() - 3_600_000,
    );
    ackLossStart = ackLoss.startTimeMs;
    stormDb = randomDatabase('warm');
    // abort-storm after more than a warm-up of steady load (about one abort a window per engine), then 8x for 10 s.
    const storm = await loadScenario(
      client,
      stormDb,
      'abort-storm',
      22,
      (c) => {
        c.rate = 60;
        c.durationMs = stormAtMs + 20_000;
        c.requests = c.rate * (c.durationMs / 1000);
        c.aborts.storms = [{ startMs: stormAtMs, durationMs: 10_000, multiplier: 8 }];
        for (const d of c.decode) {
          d.holdTimeoutMs = 300_000;
          d.capacityPages = 10_000;
        }
      },
      Date.now() - 2 * 3_600_000,
    );
    stormStart = storm.startTimeMs;
  });
  after(() => client?.close());

  it('ack-loss from a cold start: no storm from the gauges nor the flag, where the definition without a warm-up saw some', async () => {
    const registry = new Registry();
    let clock = 0;
    const metrics = createLifecycleMetrics({ client, database: ackLossDb, log: quietLog, registry, now: () => clock });
    let refreshes = 0;
    for (clock = ackLossStart + 15_000; clock <= ackLossStart + 90_000; clock += 15_000) {
      await metrics.refresh();
      const samples = await samplesOf(registry);
      const ready = pick(samples, 'holdscope_kv_storm_baseline_ready');
      assert.equal(ready.length, 2, `two decode engines at +${clock - ackLossStart} ms`);
      // The engines' first (partial) window and six whole ones: no verdict before.
      if (clock < ackLossStart + 70_000) for (const s of ready) assert.equal(s.value, 0, `in warm-up: ${JSON.stringify(s)}`);
      for (const s of pick(samples, 'holdscope_kv_abort_storm')) assert.equal(s.value, 0, JSON.stringify(s));
      for (const s of pick(samples, 'holdscope_kv_storm_pinned_fraction')) assert.equal(s.value, 0, JSON.stringify(s));
      assert.ok(pick(samples, 'holdscope_kv_window_aborts').some((s) => s.value > 0) || clock > ackLossStart + 50_000);
      assert.deepEqual(pick(samples, 'holdscope_flags', { kind: 'kv_capacity_exhaustion' }), []);
      refreshes++;
    }
    assert.equal(refreshes, 6);
    const fromMs = ackLossStart - 60_000;
    const toMs = ackLossStart + 900_000;
    const { flags } = await computeFlags(
      client,
      ackLossDb,
      { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString() },
      thresholds,
    );
    assert.deepEqual(
      flags.filter((f) => f.kind === 'kv_capacity_exhaustion'),
      [],
    );
    // The same windows judged as they were before the warm-up (a baseline of zeros before the engine's data): storms.
    const { rows, verdicts } = await flagJudgement(client, ackLossDb, fromMs, toMs);
    assert.ok(verdicts.flat().every((v) => !v.storm));
    assert.ok(verdicts.flat().some((v) => !v.ready));
    const rule = stormRuleOf(thresholds);
    const naive = pinnedRowsByEngine(rows).flatMap((e) =>
      stormWindows(
        e.map((r) => ({ t: clickHouseTimeMs(r.window_start), aborts: Number(r.aborts) })),
        firstStormWindow(fromMs),
        rule,
        -Infinity,
      ),
    );
    assert.ok(
      naive.some((v) => v.storm),
      'the test has teeth: without a warm-up the cold start is a storm',
    );
  });

  it('abort-storm after a warm-up: the flag finds it, and the gauges refreshed every 15 s report every storm window alike', async () => {
    const fromMs = stormStart - 60_000;
    const toMs = stormStart + 900_000;
    const { flags } = await computeFlags(
      client,
      stormDb,
      { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString() },
      stormThresholds,
    );
    const kv = flags.filter((f) => f.kind === 'kv_capacity_exhaustion');
    assert.ok(kv.length > 0, JSON.stringify(flags.map((f) => [f.kind, f.scope])));
    // Past the warm-up: a baseline of the engine's own windows, none of them before its data.
    const warmUp = stormStart + stormThresholds.stormWarmUpWindows * STORM_WINDOW_MS;
    for (const f of kv) assert.ok(clickHouseTimeMs(f.evidence.window_start) >= warmUp, String(f.evidence.window_start));
    // The flag's storm windows, per engine.
    const { verdicts } = await flagJudgement(client, stormDb, fromMs, toMs, stormThresholds);
    const flagStorms = new Map<string, number[]>();
    for (const engine of verdicts)
      for (const v of engine)
        if (v.storm) flagStorms.set(v.window.row.decode_engine, [...(flagStorms.get(v.window.row.decode_engine) ?? []), v.window.t]);
    assert.ok(flagStorms.size > 0);
    const stormTimes = [...flagStorms.values()].flat();
    assert.ok(stormTimes.every((t) => t >= warmUp));

    // The gauges, refreshed every 15 s (the default interval) across the storm from a clock of their own.
    const registry = new Registry();
    let clock = 0;
    const metrics = createLifecycleMetrics({
      client,
      database: stormDb,
      log: quietLog,
      registry,
      now: () => clock,
      thresholds: stormThresholds,
    });
    const gaugeStorms = new Map<string, number[]>();
    let previous: number | undefined;
    const allPinned = await runQuery<PinnedRow>(client, stormDb, 'kv_pinned', {
      from: new Date(Math.min(...stormTimes) - 120_000).toISOString(),
      to: new Date(Math.max(...stormTimes) + 120_000).toISOString(),
    });
    for (clock = Math.min(...stormTimes) - 61_000; clock <= Math.max(...stormTimes) + 60_000; clock += 15_000) {
      await metrics.refresh();
      const cover = coveredWindows(clock, previous, clock - WINDOW_MS);
      previous = cover.toMs;
      const samples = await samplesOf(registry);
      // Both engines had data within seconds of the run's start: ready a window or two after `warmUp`.
      if (clock >= warmUp + 30_000)
        for (const s of pick(samples, 'holdscope_kv_storm_baseline_ready')) assert.equal(s.value, 1, JSON.stringify(s));
      for (const s of pick(samples, 'holdscope_kv_pinned_fraction')) {
        // The peak over every window completed since the previous refresh, never only the latest.
        const inCover = allPinned.filter((r) => {
          const t = clickHouseTimeMs(r.window_start);
          return r.decode_engine === s.labels.decode_engine && t >= cover.fromMs && t < cover.toMs;
        });
        const peak = Math.max(0, ...inCover.map((r) => r.peak_pinned_slots / r.capacity_slots));
        assert.ok(Math.abs(s.value - peak) < 1e-9, `${s.labels.decode_engine} at +${clock - stormStart}: ${s.value} vs ${peak}`);
      }
      for (const s of pick(samples, 'holdscope_kv_abort_storm')) {
        const engine = s.labels.decode_engine as string;
        const expected = (flagStorms.get(engine) ?? []).some((t) => t >= cover.fromMs && t < cover.toMs);
        assert.equal(s.value, expected ? 1 : 0, `${engine} at +${clock - stormStart}`);
        if (s.value === 1) gaugeStorms.set(engine, [...(gaugeStorms.get(engine) ?? []), clock]);
        const stormPinned = pick(samples, 'holdscope_kv_storm_pinned_fraction', s.labels)[0]?.value ?? -1;
        assert.ok(expected ? stormPinned > 0 : stormPinned === 0, `${engine}: storm pinned ${stormPinned}`);
      }
    }
    assert.deepEqual([...gaugeStorms.keys()].sort(), [...flagStorms.keys()].sort());
  });

  it('promtool check metrics finds no problem in the lifecycle and request metrics', async () => {
    const registry = new Registry();
    const requests = createRequestMetrics(registry);
    try {
      const metrics = createLifecycleMetrics({
        client,
        database: stormDb,
        log: quietLog,
        registry,
        now: () => stormStart + stormAtMs + 15_000,
        thresholds: stormThresholds,
      });
      await metrics.refresh();
      const text = await registry.metrics();
      for (const name of [
        'holdscope_transfer_tail_p99_seconds',
        'holdscope_transfer_tail_hold_timeout_seconds',
        'holdscope_hold_timeout_share_lower_bound',
        'holdscope_kv_storm_pinned_fraction',
        'holdscope_query_duration_seconds_bucket{le="2"',
      ])
        assert.ok(text.includes(name), `${name} with data`);
      const check = spawnSync('/usr/bin/promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      assert.equal(check.error, undefined);
      assert.equal(`${check.stdout}${check.stderr}`.trim(), '', 'promtool reports no problem');
      assert.equal(check.status, 0);
    } finally {
      requests.close();
    }
  });
});
