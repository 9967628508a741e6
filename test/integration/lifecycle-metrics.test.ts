import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ClickHouseLogLevel, createClient } from '@clickhouse/client';
import { Registry } from 'prom-client';
import type { ClickHouseClient } from '../../common/index.ts';
import { createLifecycleMetrics } from '../../dashboards/metrics.ts';
import { wilsonLowerBound } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\["\\\\n])*"`;
const SAMPLE = new RegExp(
  `^(${NAME})(?:\\{((?:${LABEL})(?:,${LABEL})*,?)?\\})? (-?(?:[0-9]+(?:\\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\\.[0-9]+(?:[eE][+-]?[0-9]+)?)|[+-]Inf|NaN)(?: -?[0-9]+)?$`,
);

/** A strict reader of the Prometheus text exposition format (0.0.4): every line must be HELP, TYPE or a sample. */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  const typed = new Map<string, string>();
  const lines = text.split('\n');
  assert.equal(lines.at(-1), '', 'the exposition ends with a newline');
  for (const [i, line] of lines.slice(0, -1).entries()) {
    const where = `line ${i + 1}: ${JSON.stringify(line)}`;
    if (line.startsWith('# HELP ')) {
      assert.match(line, new RegExp(`^# HELP ${NAME} \\S.*$`), where);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const m = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`).exec(line);
      assert.ok(m, where);
      assert.ok(!typed.has(m[1] as string), `${where}: TYPE given twice`);
      typed.set(m[1] as string, m[2] as string);
      continue;
    }
    if (line === '') continue;
    const m = SAMPLE.exec(line);
    assert.ok(m, `${where} is not a sample line`);
    const [, name, labelText, value] = m as unknown as [string, string, string | undefined, string];
    const family = name.replace(/_(bucket|sum|count|total)$/, '');
    assert.ok(typed.has(name) || typed.has(family), `${where}: sample before its TYPE`);
    const labels: Record<string, string> = {};
    for (const l of (labelText ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = (l[2] as string).replace(/\\n/g, '\n').replace(/\\(["\\])/g, '$1');
    samples.push({ name, labels, value: value === '+Inf' ? Infinity : value === '-Inf' ? -Infinity : Number(value) });
  }
  return samples;
}

const pick = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

describe('lifecycle metrics: gauges from the named queries over the last 15 minutes', () => {
  let client: ClickHouseClient;
  let database: string;
  let started = 0;
  let noAckStart = 0;
  let noAckLastAbort = 0;
  before(async () => {
    started = Date.now();
    client = await embeddedClickHouse();
    database = randomDatabase('lcm');
    // Both scenarios in one database, a few minutes ago, small: each finishes (30 s holds included) well before
    // now. The no-ack run is its own cluster, since both scenarios name their engines decode-0 and decode-1.
    const noAck = await loadScenario(
      client,
      database,
      'no-ack-backend',
      3,
      (c) => {
        c.requests = 300;
        c.cluster = 'no-ack';
        // Three times the scenario's abort rate, so that 300 requests give the pairing flag its 20 holds.
        c.aborts.probability = 0.3;
      },
      Date.now() - 240_000,
    );
    noAckStart = noAck.startTimeMs;
    // The truth's times are milliseconds of simulated time from the run's start.
    noAckLastAbort = noAckStart + Math.max(...noAck.truth.map((t) => t.hold_start_ms ?? 0));
    await loadScenario(
      client,
      database,
      'late-write-bug',
      5,
      (c) => {
        // Enough holds for each pairing's own long_transfer_tail judgement (longTailMinHolds, 20, per pairing).
        c.requests = 1200;
      },
      Date.now() - 180_000,
    );
    console.log(`# scenarios loaded in ${Date.now() - started} ms`);
  });
  after(() => client?.close());

  it('exposes valid Prometheus text carrying the scenarios', async () => {
    const metrics = createLifecycleMetrics({ client, database, log: quietLog });
    const t0 = Date.now();
    await metrics.refresh();
    console.log(`# refresh took ${Date.now() - t0} ms`);
    const text = await metrics.registry.metrics();
    const samples = parseExposition(text);

    assert.equal(pick(samples, 'holdscope_metrics_refresh_failures_total')[0]?.value, 0);
    const stamp = pick(samples, 'holdscope_metrics_refresh_timestamp_seconds')[0]?.value ?? 0;
    assert.ok(Math.abs(stamp - Date.now() / 1000) < 120, `refresh timestamp ${stamp}`);
    for (const s of samples) assert.ok(s.name.startsWith('holdscope_'), s.name);
    for (const s of samples) assert.ok(!Object.keys(s.labels).includes('request_id'), `${s.name} carries a request id`);
    // Every help text says the window it covers.
    for (const m of await metrics.registry.getMetricsAsJSON()) {
      if (m.name.startsWith('holdscope_metrics_refresh')) continue;
      assert.match(m.help, /last (15m|6h)|10 s window/, `${m.name}: ${m.help}`);
    }

    // no-ack-backend: the nixl engines never drain, so every resolved hold timed out.
    const noAckShare = pick(samples, 'holdscope_hold_timeout_share', { cluster: 'no-ack' });
    assert.deepEqual(noAckShare.map((s) => [s.labels.decode_engine, s.value]).sort(), [
      ['decode-0', 1],
      ['decode-1', 1],
    ]);
    const drained = pick(samples, 'holdscope_hold_resolutions', { cluster: 'no-ack', resolution: 'drained' });
    assert.deepEqual(
      drained.map((s) => s.value),
      [0, 0],
    );
    const tails = pick(samples, 'holdscope_transfer_tail_p99_seconds');
    // Per pairing: every tail series names its prefill engine, decode engine and backend.
    for (const s of tails) assert.ok(s.labels.prefill_engine && s.labels.decode_engine && s.labels.backend, JSON.stringify(s));
    assert.ok(
      tails.some((s) => s.labels.backend === 'nixl'),
      JSON.stringify(tails),
    );
    assert.ok(
      tails.some((s) => s.labels.backend === 'mooncake'),
      JSON.stringify(tails),
    );
    for (const s of pick(samples, 'holdscope_transfer_tail_hold_timeout_seconds', { backend: 'nixl' })) assert.equal(s.value, 30);
    // late-write-bug: tails outlast the 300 ms timeout.
    const mooncakeTail = pick(samples, 'holdscope_transfer_tail_p99_seconds', { backend: 'mooncake' });
    for (const s of mooncakeTail) {
      const timeout = pick(samples, 'holdscope_transfer_tail_hold_timeout_seconds', s.labels)[0]?.value ?? 0;
      assert.equal(timeout, 0.3);
      assert.ok(s.value >= 0.5 * timeout, `p99 ${s.value} against ${timeout}`);
    }

    const resolutions = pick(samples, 'holdscope_hold_resolutions');
    assert.deepEqual(new Set(resolutions.map((s) => s.labels.resolution)), new Set(['drained', 'timeout', 'open']));
    assert.equal(resolutions.length, 2 * 2 * 3, 'two clusters, two decode engines each, three resolutions');
    const timeouts = pick(samples, 'holdscope_hold_resolutions', { cluster: 'no-ack', resolution: 'timeout' }).reduce(
      (n, s) => n + s.value,
      0,
    );
    assert.ok(timeouts >= 10, `timeouts ${timeouts}`);
    for (const s of pick(samples, 'holdscope_hold_timeout_share', { cluster: 'default' }))
      assert.ok(s.value > 0 && s.value <= 1, JSON.stringify(s));
    // The timeout_heavy flag's own bound, on the same counts, for the TimeoutHeavy rule to compare with its threshold.
    const bounds = pick(samples, 'holdscope_hold_timeout_share_lower_bound');
    assert.equal(bounds.length, 4);
    for (const b of bounds) {
      const count = (resolution: string) => pick(samples, 'holdscope_hold_resolutions', { ...b.labels, resolution })[0]?.value ?? 0;
      assert.equal(b.value, wilsonLowerBound(count('timeout'), count('timeout') + count('drained')), JSON.stringify(b));
      assert.ok(b.value < (pick(samples, 'holdscope_hold_timeout_share', b.labels)[0]?.value ?? 0));
    }

    // Flags: late writes from late-write-bug, the no-ack pairing, counted by kind and severity.
    const lateWrites = pick(samples, 'holdscope_flags', { kind: 'late_write', severity: 'critical', cluster: 'default' })[0]?.value ?? 0;
    assert.ok(lateWrites > 0, `late_write flags ${lateWrites}`);
    const flagCounts = JSON.stringify(pick(samples, 'holdscope_flags'));
    assert.ok(
      (pick(samples, 'holdscope_flags', { cluster: 'no-ack', kind: 'pairing_incompatible', severity: 'warning' })[0]?.value ?? 0) > 0,
      flagCounts,
    );
    assert.ok(
      (pick(samples, 'holdscope_flags', { cluster: 'default', kind: 'long_transfer_tail', severity: 'critical' })[0]?.value ?? 0) > 0,
      flagCounts,
    );
    assert.deepEqual(pick(samples, 'holdscope_flags', { cluster: 'no-ack', kind: 'late_write' }), [], flagCounts);

    for (const name of ['holdscope_open_holds', 'holdscope_open_holds_past_timeout']) {
      const open = pick(samples, name);
      assert.equal(open.length, 4, name);
      for (const s of open) assert.ok(Number.isInteger(s.value) && s.value >= 0, JSON.stringify(s));
    }
    // The scenarios ended minutes ago: the latest 10 s window holds nothing.
    for (const s of pick(samples, 'holdscope_kv_pinned_fraction')) assert.ok(s.value >= 0 && s.value <= 1, JSON.stringify(s));
    for (const s of pick(samples, 'holdscope_kv_window_aborts')) assert.equal(s.value, 0);
    assert.equal(pick(samples, 'holdscope_kv_aborts_trailing_median').length, 4);
  });

  it('a window in which the scenarios ran sees the abort load in its latest 10 s window, and a window without data drops every series', async () => {
    const registry = new Registry();
    // Half a second into the second 10 s window after the no-ack-backend run's last abort: the latest complete
    // window is the first that starts after every abort (wherever the run fell against the 10 s grid), while the
    // run's 30 s holds still pin slots.
    let clock = (Math.ceil((noAckLastAbort + 1) / 10_000) + 1) * 10_000 + 500;
    assert.ok(clock - noAckStart < 30_000, `the latest window ends ${clock - noAckStart} ms into the run`);
    const metrics = createLifecycleMetrics({ client, database, log: quietLog, registry, now: () => clock });
    await metrics.refresh();
    let samples = parseExposition(await registry.metrics());
    const aborts = pick(samples, 'holdscope_kv_window_aborts', { cluster: 'no-ack' });
    assert.equal(aborts.length, 2);
    // No abort in the latest complete window; the run's 30 s holds still pinned slots in it.
    assert.deepEqual(
      aborts.map((s) => s.value),
      [0, 0],
    );
    const pinned = pick(samples, 'holdscope_kv_pinned_fraction', { cluster: 'no-ack' });
    assert.equal(pinned.length, 2);
    for (const s of pinned) assert.ok(s.value > 0 && s.value <= 1, JSON.stringify(s));

    clock = started - 86_400_000;
    await metrics.refresh();
    samples = parseExposition(await registry.metrics());
    for (const name of [
      'holdscope_hold_resolutions',
      'holdscope_hold_timeout_share',
      'holdscope_transfer_tail_p99_seconds',
      'holdscope_kv_pinned_fraction',
      'holdscope_kv_abort_storm',
      'holdscope_flags',
    ]) {
      assert.deepEqual(pick(samples, name), [], `${name} lingers after its label sets disappeared`);
    }
    assert.equal(pick(samples, 'holdscope_metrics_refresh_failures_total')[0]?.value, 0);
  });

  it('a failed refresh counts, logs and keeps the previous values, without throwing', async () => {
    let broken = false;
    const flaky = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === 'query' && broken)
          return () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }));
        const value = Reflect.get(target, prop, receiver) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const warnings: string[] = [];
    const log = Object.assign(Object.create(quietLog) as typeof quietLog, {
      warn: (_obj: unknown, msg: string) => void warnings.push(msg),
    });
    const metrics = createLifecycleMetrics({ client: flaky, database, log });
    await metrics.refresh();
    const before = parseExposition(await metrics.registry.metrics());
    broken = true;
    await metrics.refresh();
    await metrics.refresh();
    const afterFailure = parseExposition(await metrics.registry.metrics());
    assert.equal(pick(afterFailure, 'holdscope_metrics_refresh_failures_total')[0]?.value, 2);
    assert.equal(warnings.length, 2);
    const steady = (s: Sample[]) => s.filter((x) => !x.name.startsWith('holdscope_metrics_refresh'));
    assert.deepEqual(steady(afterFailure), steady(before));
    assert.equal(
      pick(afterFailure, 'holdscope_metrics_refresh_timestamp_seconds')[0]?.value,
      pick(before, 'holdscope_metrics_refresh_timestamp_seconds')[0]?.value,
    );
  });

  it('an unreachable ClickHouse server: the failure counter grows, refresh resolves, start/stop do not hold the process', async () => {
    // A real client on a port nobody listens on; its own console logger silenced, holdscope's counts the failures.
    const unreachable = createClient({ url: 'http://127.0.0.1:1', request_timeout: 2000, log: { level: ClickHouseLogLevel.OFF } });
    try {
      const metrics = createLifecycleMetrics({ client: unreachable, database: 'holdscope', log: quietLog });
      await metrics.refresh();
      const samples = parseExposition(await metrics.registry.metrics());
      assert.equal(pick(samples, 'holdscope_metrics_refresh_failures_total')[0]?.value, 1);
      assert.equal(pick(samples, 'holdscope_metrics_refresh_timestamp_seconds')[0]?.value, 0);
      assert.deepEqual(pick(samples, 'holdscope_hold_resolutions'), []);
      metrics.start(50);
      await new Promise((resolve) => setTimeout(resolve, 300));
      metrics.stop();
      await metrics.refresh();
      const failures = pick(parseExposition(await metrics.registry.metrics()), 'holdscope_metrics_refresh_failures_total')[0]?.value ?? 0;
      assert.ok(failures >= 3, `failures ${failures}`);
    } finally {
      await unreachable.close();
    }
  });
});
