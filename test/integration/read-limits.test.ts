import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { InputError, type ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { DEFAULT_READ_LIMITS, runQuery } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const DAY_MS = 86_400_000;

describe('read limits through the read API, the charts and the runner (embedded ClickHouse)', () => {
  let client: ClickHouseClient;
  let api: { port: number; close(): Promise<void> };
  let database: string;
  let base: string;
  let loadedAt: number;

  before(async () => {
    client = await embeddedClickHouse('holdscope-read-limits-');
    database = randomDatabase('limits');
    loadedAt = Date.now();
    await loadScenario(client, database, 'mixed', 5, (c) => {
      c.requests = 400;
    });
    api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    base = `http://127.0.0.1:${api.port}`;
  });
  after(async () => {
    await api?.close();
    await client?.close();
  });

  const get = async (path: string) => {
    const started = performance.now();
    const res = await fetch(`${base}${path}`);
    const body = (await res.json()) as { error?: string };
    return { status: res.status, error: body.error ?? '', ms: performance.now() - started, body };
  };
  const range = (fromMs: number, toMs: number) =>
    `from=${encodeURIComponent(new Date(fromMs).toISOString())}&to=${encodeURIComponent(new Date(toMs).toISOString())}`;

  it('answers /api/flags beyond the max read window with a 400 naming it, at once (two centuries ran 386 s and killed the process)', async () => {
    const centuries = await get('/api/flags?from=1926-01-01T00:00:00Z&to=2126-01-01T00:00:00Z');
    assert.equal(centuries.status, 400);
    assert.match(centuries.error, /outside the times holdscope can read/);
    const wide = await get(`/api/flags?from=2026-01-01T00:00:00Z&to=2126-01-01T00:00:00Z`);
    assert.equal(wide.status, 400);
    assert.match(wide.error, /^to: 2126-01-01T00:00:00Z is outside/);
    const eightDays = await get(`/api/flags?${range(loadedAt - 8 * DAY_MS, loadedAt)}`);
    assert.equal(eightDays.status, 400);
    assert.match(
      eightDays.error,
      /from\.\.to covers 8 days; a read may cover at most 7 days \(the max read window, maxReadWindowMs = 604800000\)/,
    );
    for (const answer of [centuries, wide, eightDays]) assert.ok(answer.ms < 1000, `${answer.ms} ms`);
  });

  it('answers to=9999-12-31 and from after to with a 400 naming the parameter', async () => {
    const year9999 = await get('/api/flags?from=2026-12-01T00:00:00Z&to=9999-12-31');
    assert.equal(year9999.status, 400);
    assert.match(year9999.error, /^to: 9999-12-31 is outside the times holdscope can read/);
    const reversed = await get('/api/flags?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z');
    assert.equal(reversed.status, 400);
    assert.match(reversed.error, /^to must be after from/);
    const notATime = await get('/api/flags?from=2026-02-30T00:00:00Z&to=2026-03-01T00:00:00Z');
    assert.equal(notATime.status, 400);
    assert.match(notATime.error, /^from: expected an ISO 8601 time/);
  });

  it('serves the widest allowed window, and finds in it what a narrow one finds', async () => {
    const widest = await get(`/api/flags?${range(loadedAt + 3_600_000 - 7 * DAY_MS, loadedAt + 3_600_000)}`);
    assert.equal(widest.status, 200, widest.error);
    const narrow = await get(`/api/flags?${range(loadedAt - 2 * 3_600_000, loadedAt + 3_600_000)}`);
    const kinds = (answer: typeof widest) =>
      (answer.body as { totals: { kind: string; count: number }[] }).totals.map((t) => `${t.kind} ${t.count}`).sort();
    assert.deepEqual(kinds(widest), kinds(narrow));
    assert.ok(kinds(widest).length > 0, 'the mixed scenario raises flags');
  });

  it('bounds the named queries, their lookback and the charts by the same rule', async () => {
    const kv = await get(`/api/queries/kv_pinned?${range(loadedAt - 8 * DAY_MS, loadedAt)}`);
    assert.equal(kv.status, 400);
    assert.match(kv.error, /a read may cover at most 7 days/);
    const lookback = await get(`/api/queries/flags_lifecycle?${range(loadedAt - DAY_MS, loadedAt)}&open_lookback_hours=1000`);
    assert.equal(lookback.status, 400);
    assert.match(lookback.error, /^open_lookback_hours: 1000 hours reaches further back/);
    const year9999 = await get('/api/queries/longest_holds?from=2026-12-01T00:00:00Z&to=9999-12-31T00:00:00Z');
    assert.equal(year9999.status, 400);
    for (const chart of ['kv_pinned.svg', 'resolution.json', 'tails.json']) {
      const wide = await get(`/charts/${chart}?${range(loadedAt - 8 * DAY_MS, loadedAt)}`);
      assert.equal(wide.status, 400, chart);
      assert.match(wide.error, /a read may cover at most 7 days/, chart);
    }
    // The widest allowed resolution chart has one bar per 10 minutes, not 10,080 per engine.
    const week = await get(`/charts/resolution.json?${range(loadedAt + 3_600_000 - 7 * DAY_MS, loadedAt + 3_600_000)}`);
    assert.equal(week.status, 200, week.error);
    const counts = (week.body as { datasets: { counts: { t: number; t_end: number }[] } }).datasets.counts;
    assert.ok(counts.length > 0 && counts.every((c) => c.t_end - c.t === 600_000), JSON.stringify(counts[0]));
  });

  it('stops a read at its memory limit with a 400 naming it, and the limit stays with that read alone', async () => {
    const setting = async () =>
      (
        (await (await client.query({ query: "SELECT getSetting('max_memory_usage') AS v", format: 'JSONEachRow' })).json()) as {
          v: string | number;
        }[]
      )[0]?.v;
    const before = await setting();
    const params = { from: new Date(loadedAt - 2 * 3_600_000).toISOString(), to: new Date(loadedAt + 3_600_000).toISOString() };
    await assert.rejects(
      runQuery(client, database, 'kv_pinned', params, { limits: { ...DEFAULT_READ_LIMITS, maxReadMemoryBytes: 1_000_000 } }),
      (e: unknown) =>
        e instanceof InputError && /kv_pinned stopped at the read memory limit \(max_memory_usage 1000000 bytes/.test(e.message),
    );
    // chdb applies client settings with SET, which would stay on the connection for the writes too.
    assert.equal(await setting(), before);
    assert.ok((await runQuery(client, database, 'kv_pinned', params)).length > 0);
  });
});
