import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClickHouseError } from '@clickhouse/client';
import { ConfigError, InputError, UnavailableError, type ClickHouseClient } from '../../common/index.ts';
import { chartBucketSeconds, MAX_CHART_BUCKETS } from '../../dashboards/charts/render.ts';
import { createLifecycleMetrics } from '../../dashboards/index.ts';
import {
  bindParams,
  DEFAULT_READ_LIMITS,
  getQuery,
  parseReadTime,
  queryReadLimitsSchema,
  readLimitsSchema,
  readWindow,
  runQuery,
} from '../../queries/index.ts';
import { quietLog } from '../support/stack.ts';

const DAY_MS = 86_400_000;
const rejects = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(
    fn,
    (error: unknown) => error instanceof InputError && pattern.test(error.message),
    `expected an InputError matching ${pattern}`,
  );

describe('read window: the one rule for every read range', () => {
  it('parses ISO 8601 times, UTC when no zone is given', () => {
    assert.equal(parseReadTime('2026-12-01T00:00:00Z', 'from'), Date.UTC(2026, 11, 1));
    assert.equal(parseReadTime('2026-12-01 00:00:00.250', 'from'), Date.UTC(2026, 11, 1, 0, 0, 0, 250));
    assert.equal(parseReadTime('2026-12-01', 'from'), Date.UTC(2026, 11, 1));
    assert.equal(parseReadTime('2026-12-01T02:30:00+02:30', 'from'), Date.UTC(2026, 11, 1));
    assert.equal(parseReadTime('2026-12-01T00:00:00.123456789Z', 'from'), Date.UTC(2026, 11, 1, 0, 0, 0, 123));
  });

  it('refuses what is not a time, naming the parameter', () => {
    for (const bad of ['yesterday', '2026-02-30T00:00:00Z', '2026-13-01', '2026-12-01T24:00:00Z', '1796169600000', ''])
      rejects(() => parseReadTime(bad, 'to'), /^to: expected an ISO 8601 time/);
  });

  it('refuses times ClickHouse cannot hold (year 9999 was a 500)', () => {
    rejects(() => parseReadTime('9999-12-31T00:00:00Z', 'to'), /^to: 9999-12-31T00:00:00Z is outside the times holdscope can read/);
    rejects(() => parseReadTime('1926-01-01T00:00:00Z', 'from'), /^from: .* is outside/);
    assert.equal(parseReadTime('2106-02-07T06:28:15Z', 'to'), Date.UTC(2106, 1, 7, 6, 28, 15));
  });

  it('refuses to before from, and a range wider than the max read window, naming the limit', () => {
    rejects(() => readWindow('2026-12-02T00:00:00Z', '2026-12-01T00:00:00Z', DEFAULT_READ_LIMITS), /^to must be after from/);
    rejects(() => readWindow('2026-12-01T00:00:00Z', '2026-12-01T00:00:00Z', DEFAULT_READ_LIMITS), /^to must be after from/);
    rejects(
      () => readWindow('2026-12-01T00:00:00Z', '2026-12-09T00:00:00Z', DEFAULT_READ_LIMITS),
      /covers 8 days; a read may cover at most 7 days \(the max read window, maxReadWindowMs = 604800000\)/,
    );
    rejects(
      () => readWindow('2026-12-01T00:00:00Z', '2026-12-01T02:00:00Z', { maxReadWindowMs: 3_600_000 }),
      /covers 2 hours; a read may cover at most 1 hour /,
    );
    // Times relative to now, as every windowed read takes them (the page's links, a script's `-2h`).
    const now = () => Date.UTC(2026, 11, 1, 12);
    assert.equal(readWindow('-2h', 'now', DEFAULT_READ_LIMITS, { now }).fromMs, Date.UTC(2026, 11, 1, 10));
    assert.equal(readWindow('-30m', undefined, DEFAULT_READ_LIMITS, { now, defaultMs: 3_600_000 }).toMs, now());
    rejects(() => readWindow('-2x', 'now', DEFAULT_READ_LIMITS, { now }), /^from: expected an ISO 8601 time or a time relative to now/);
    const w = readWindow('2026-12-01T00:00:00Z', '2026-12-08T00:00:00Z', DEFAULT_READ_LIMITS);
    assert.deepEqual(w, {
      from: '2026-12-01T00:00:00.000Z',
      to: '2026-12-08T00:00:00.000Z',
      fromMs: Date.UTC(2026, 11, 1),
      toMs: Date.UTC(2026, 11, 8),
    });
  });

  it('requires both ends unless a default range is given', () => {
    rejects(() => readWindow(undefined, '2026-12-01T00:00:00Z', DEFAULT_READ_LIMITS), /from and to are required/);
    const now = Date.UTC(2026, 11, 5, 12);
    assert.deepEqual(readWindow(undefined, undefined, DEFAULT_READ_LIMITS, { defaultMs: 3_600_000, now: () => now }), {
      from: '2026-12-05T11:00:00.000Z',
      to: '2026-12-05T12:00:00.000Z',
      fromMs: now - 3_600_000,
      toMs: now,
    });
  });

  it('applies to every named query with a range, and to its lookback', () => {
    const kv = getQuery('kv_pinned');
    assert.equal(bindParams(kv, { from: '2026-12-01T00:00:00Z', to: '2026-12-08T00:00:00Z' }).from, '2026-12-01 00:00:00.000');
    rejects(
      () => bindParams(kv, { from: '2026-12-01T00:00:00Z', to: '2026-12-08T00:00:01Z' }),
      /^from\.\.to covers 7 days 1 s; a read may cover at most 7 days /,
    );
    rejects(() => bindParams(kv, { from: '2026-12-01T00:00:00Z', to: '9999-12-31' }), /^to: .* is outside/);
    rejects(
      () => bindParams(kv, { from: '2026-12-01T00:00:00Z', to: '2026-12-02T00:00:00Z', open_lookback_hours: '200' }),
      /^open_lookback_hours: 200 hours reaches further back than a read may cover \(7 days, the max read window\)/,
    );
    // The CLI's own, wider bound.
    const cli = queryReadLimitsSchema.parse({});
    assert.equal(cli.maxReadWindowMs, 31 * DAY_MS);
    assert.equal(
      bindParams(kv, { from: '2026-11-01T00:00:00Z', to: '2026-12-01T00:00:00Z' }, cli.maxReadWindowMs).to,
      '2026-12-01 00:00:00.000',
    );
    // Times relative to now, as the pages' reads take them, and bounded alike.
    const nowMs = Date.UTC(2026, 11, 6, 12);
    assert.deepEqual(
      [bindParams(kv, { from: '-2h', to: 'now' }, undefined, nowMs).from, bindParams(kv, { from: '-2h', to: 'now' }, undefined, nowMs).to],
      ['2026-12-06 10:00:00.000', '2026-12-06 12:00:00.000'],
    );
    rejects(
      () => bindParams(kv, { from: '-8d', to: 'now' }, undefined, nowMs),
      /^from\.\.to covers 8 days; a read may cover at most 7 days /,
    );
    rejects(
      () => bindParams(kv, { from: '-2x', to: 'now' }, undefined, nowMs),
      /^from: expected an ISO 8601 time or a time relative to now/,
    );
  });

  it('declares its defaults and refuses nonsense', () => {
    assert.deepEqual(readLimitsSchema.parse({}), {
      maxReadWindowMs: 7 * DAY_MS,
      maxReadSeconds: 30,
      maxReadMemoryBytes: 2 ** 30,
      maxConcurrentReads: 6,
      maxQueuedReads: 32,
    });
    assert.equal(readLimitsSchema.parse({ maxReadWindowMs: '86400000' }).maxReadWindowMs, DAY_MS);
    assert.equal(readLimitsSchema.safeParse({ maxReadSeconds: '0' }).success, false);
    assert.equal(readLimitsSchema.safeParse({ maxConcurrentReads: '1.5' }).success, false);
  });

  it('keeps the resolution chart within MAX_CHART_BUCKETS buckets, one a minute up to a day', () => {
    assert.equal(chartBucketSeconds(3_600_000), 60);
    assert.equal(chartBucketSeconds(DAY_MS), 60);
    assert.equal(chartBucketSeconds(7 * DAY_MS), 600);
    for (const range of [DAY_MS + 1, 7 * DAY_MS, 31 * DAY_MS, 400 * DAY_MS, 3000 * DAY_MS])
      assert.ok(range / 1000 / chartBucketSeconds(range) <= MAX_CHART_BUCKETS, String(range));
  });

  it('refuses lifecycle gauges whose fixed ranges a read may not cover, at start-up', () => {
    const client = {} as ClickHouseClient;
    const limits = { ...DEFAULT_READ_LIMITS, maxReadWindowMs: 3_600_000 };
    assert.throws(
      () => createLifecycleMetrics({ client, database: 'x', log: quietLog, readLimits: limits }),
      (e: unknown) => e instanceof ConfigError && /open-holds lookback \(6 hours\) is wider than a read may cover/.test(e.message),
    );
    assert.throws(
      () =>
        createLifecycleMetrics({
          client,
          database: 'x',
          log: quietLog,
          readLimits: limits,
          windowMs: 2 * 3_600_000,
          openHoldLookbackMs: 0,
        }),
      ConfigError,
    );
    createLifecycleMetrics({ client, database: 'x', log: quietLog, readLimits: limits, openHoldLookbackMs: 3_600_000 });
  });
});

/** A client whose every query fails as ClickHouse would, recording what it was sent. */
function failingClient(code: string, type: string, message: string) {
  const sent: string[] = [];
  const client = {
    query: async (params: { query: string }) => {
      sent.push(params.query);
      throw new ClickHouseError({ message, code, type });
    },
  } as unknown as ClickHouseClient;
  return { client, sent };
}

describe('read limits in the runner', () => {
  const range = { from: '2026-12-01T00:00:00Z', to: '2026-12-01T01:00:00Z' };

  it('sends each read with its limits and its name as the query own SETTINGS clause', async () => {
    const { client, sent } = failingClient('60', 'UNKNOWN_TABLE', 'no table');
    await assert.rejects(
      runQuery(client, 'db', 'kv_pinned', range, {
        limits: { ...DEFAULT_READ_LIMITS, maxReadSeconds: 12, maxReadMemoryBytes: 50_000_000 },
      }),
    );
    assert.match(
      sent[0] ?? '',
      /\nSETTINGS max_execution_time = 12, max_memory_usage = 50000000, timeout_overflow_mode = 'throw', log_comment = 'holdscope kv_pinned'$/,
    );
  });

  it('answers a read stopped at its time or memory limit with a 400 naming the limit', async () => {
    const timeout = failingClient('159', 'TIMEOUT_EXCEEDED', 'Timeout exceeded: elapsed 30001 ms, maximum: 30000 ms');
    await assert.rejects(
      runQuery(timeout.client, 'db', 'kv_pinned', range),
      (e: unknown) =>
        e instanceof InputError && /kv_pinned stopped at the read time limit \(max_execution_time 30 s, maxReadSeconds\)/.test(e.message),
    );
    const memory = failingClient('241', 'MEMORY_LIMIT_EXCEEDED', 'Query memory limit exceeded: would use 1.00 GiB, maximum: 1.00 GiB');
    await assert.rejects(
      runQuery(memory.client, 'db', 'kv_pinned', range),
      (e: unknown) =>
        e instanceof InputError && /read memory limit \(max_memory_usage 1073741824 bytes, maxReadMemoryBytes\)/.test(e.message),
    );
    // The server short of memory overall is not the read's doing: retriable, 503.
    const total = failingClient('241', 'MEMORY_LIMIT_EXCEEDED', 'Memory limit (total) exceeded: would use 20.00 GiB');
    await assert.rejects(runQuery(total.client, 'db', 'kv_pinned', range), (e: unknown) => e instanceof UnavailableError);
  });
});
