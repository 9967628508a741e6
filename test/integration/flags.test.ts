import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { MAX_LOOKUP_REQUEST_IDS, startHttpServer } from '../../dashboards/index.ts';
import { buildScenario, SCENARIO_NAMES, type LifecycleTruth } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue, migrate } from '../../pipeline/index.ts';
import { computeFlags, formatStringListText, runQuery, type Flag } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { assertLateWriteVictimsEqualTruth, assertLifecycleFlagsEqualTruth, isLifecycleFlag } from '../support/flag-truth.ts';
import { assertPr35049LateWrite, sendPr35049Trace } from '../support/pr35049-trace.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const window = (startTimeMs: number) => ({
  from: new Date(startTimeMs - 60_000).toISOString(),
  to: new Date(Date.now() + 60_000).toISOString(),
});

describe('detections against the simulator ground truth', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  for (const seed of [41, 42]) {
    for (const name of SCENARIO_NAMES) {
      it(`${name}, seed ${seed}: per-lifecycle flags have precision 1.0 and recall 1.0, late-write victims match`, async () => {
        const database = randomDatabase('flags');
        const run = await loadScenario(client, database, name, seed, (c) => {
          c.requests = name === 'mixed' ? 700 : 300;
        });
        const { flags } = await computeFlags(client, database, window(run.startTimeMs), undefined, { limitPerKind: 100_000 });
        const raised = assertLifecycleFlagsEqualTruth(flags, run.truth);
        if (name === 'steady')
          assert.deepEqual(
            flags.filter((f) => f.severity === 'critical'),
            [],
          );
        if (name === 'late-write-bug' || name === 'mixed') assert.ok(raised > 0);
        if (name === 'mixed') {
          // Capped to the 2 most recent per kind, with totals that still count every flag.
          const capped = await computeFlags(client, database, window(run.startTimeMs), undefined, { limitPerKind: 2 });
          const count = (list: Flag[]) => list.reduce((m, f) => m.set(f.kind, (m.get(f.kind) ?? 0) + 1), new Map<string, number>());
          for (const [kind, n] of count(capped.flags.filter(isLifecycleFlag))) assert.ok(n <= 2, `${kind}: ${n} listed`);
          assert.deepEqual(new Map(capped.totals.map((t) => [t.kind, t.count])), count(flags));
          assert.ok(
            capped.totals.some((t) => t.count > 2),
            'some kind has more flags than listed',
          );
        }
        const byKey = new Map<string, LifecycleTruth>(run.truth.map((t) => [`${t.request_id}/${t.generation}`, t]));
        // Every lifecycle flag names its engines with their versions, and its backend; each violation is critical
        // and names its incident.
        const config = buildScenario(name, seed).config;
        const version = new Map([...config.prefill, ...config.decode].map((e) => [e.id, e.version]));
        for (const flag of flags.filter(isLifecycleFlag)) {
          const t = byKey.get(`${flag.request_id}/${flag.generation}`) as LifecycleTruth;
          const where = `${flag.kind} ${flag.request_id}/${flag.generation}: ${flag.summary}`;
          assert.ok(flag.summary.includes(`decode ${t.decode_engine} (${version.get(t.decode_engine)})`), where);
          if (t.transfers.ok + t.transfers.failed + t.transfers.timeout > 0)
            assert.ok(flag.summary.includes(`prefill ${t.prefill_engine} (${version.get(t.prefill_engine)})`), where);
          assert.ok(flag.summary.includes(`backend ${t.backend}`), where);
          assert.equal(flag.scope?.decode_version, version.get(t.decode_engine), where);
          if (flag.kind === 'open_hold') assert.equal((flag as { incident?: string }).incident, undefined, where);
          else {
            assert.equal(flag.severity, 'critical', where);
            assert.match((flag as { incident?: string }).incident ?? '', /^[0-9a-f]{16}$/, where);
          }
        }
        assertLateWriteVictimsEqualTruth(flags, run.truth);
        if (name === 'late-write-bug') {
          // Every transfer span stored twice, as a replay after a crash leaves it: the victims query reads the spans
          // table without FINAL, so it must still return each landing once.
          const victimRows = () =>
            runQuery(client, database, 'late_write_victims', { from: window(run.startTimeMs).from, to: window(run.startTimeMs).to });
          const before = await victimRows();
          assert.ok(before.length > 0);
          await client.command({ query: `INSERT INTO ${database}.spans SELECT * FROM ${database}.spans WHERE name = 'pd.transfer'` });
          assert.deepEqual(await victimRows(), before);
          // Over HTTP a query answers its first max_rows rows, in its own order, and says whether it had more.
          const api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
          try {
            const { from, to } = window(run.startTimeMs);
            const capped = async (maxRows: number) =>
              (
                await fetch(
                  `http://127.0.0.1:${api.port}/api/queries/late_write_victims?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&max_rows=${maxRows}`,
                )
              ).json();
            assert.ok(before.length > 2, `${before.length} victim rows`);
            assert.deepEqual(await capped(2), { rows: before.slice(0, 2), truncated: true, max_rows: 2 });
            assert.deepEqual(await capped(before.length), { rows: before, truncated: false, max_rows: before.length });
          } finally {
            await api.close();
          }
        }
      });
    }
  }

  it('replays the SGLang PR 35049 trace (mode OFF) and names request B as the victim of pages 14..32', async () => {
    const database = randomDatabase('pr35049');
    await migrate(client, { database, retentionDays: 30 });
    const metrics = createPipelineMetrics();
    const writer = createWriter(client, { database, maxBatchRows: 1000, lingerMs: 5 }, metrics, quietLog);
    const queue = new InProcessQueue(writer, { maxPendingSpans: 10_000, timeoutMs: 30_000, metrics, log: quietLog });
    const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
    const port = await collector.start();
    const startMs = Date.now() - 3_600_000;
    await sendPr35049Trace(`http://127.0.0.1:${port}`, 'room', startMs);
    await writer.flush();
    await collector.shutdown();
    const { flags } = await computeFlags(client, database, window(startMs - 10_000));
    assertPr35049LateWrite(flags, 'room');
  });

  it('times its requests by route and the named queries behind them on /metrics', async () => {
    const database = randomDatabase('timed');
    await migrate(client, { database, retentionDays: 30 });
    const registry = new Registry();
    // Two servers on one registry (one of them over a database that does not exist) share its histograms, and each
    // query is counted once however many servers observe the process's queries.
    const api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog, metricsRegistry: registry });
    const broken = await startHttpServer({
      port: 0,
      host: '127.0.0.1',
      client,
      database: `${database}_missing`,
      log: quietLog,
      metricsRegistry: registry,
    });
    const range = `from=${encodeURIComponent('2026-01-01T00:00:00Z')}&to=${encodeURIComponent('2026-01-02T00:00:00Z')}`;
    const five = ['flags_lifecycle', 'late_write_victims', 'hold_resolution_groups', 'transfer_tails', 'kv_pinned'];
    const count = (text: string, metric: string, labels: string) =>
      Number(new RegExp(`^${metric}_count\\{${labels}\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    try {
      const base = `http://127.0.0.1:${api.port}`;
      assert.equal((await fetch(`${base}/api/flags?${range}`)).status, 200);
      assert.equal((await fetch(`${base}/api/lifecycles/no-such-request`)).status, 404);
      assert.equal((await fetch(`${base}/api/queries/longest_holds?from=yesterday&to=2026-01-01T00:00:00Z`)).status, 400);
      assert.equal((await fetch(`${base}/api/queries/longest_holds?${range}`)).status, 200);
      const failed = await fetch(`http://127.0.0.1:${broken.port}/api/queries/longest_holds?${range}`);
      assert.ok(failed.status >= 500, `a missing database answers ${failed.status}`);
      const text = await (await fetch(`${base}/metrics`)).text();
      for (const name of five) assert.equal(count(text, 'holdscope_query_duration_seconds', `query="${name}",outcome="ok"`), 1, name);
      assert.equal(count(text, 'holdscope_query_duration_seconds', 'query="longest_holds",outcome="ok"'), 1);
      assert.equal(count(text, 'holdscope_query_duration_seconds', 'query="longest_holds",outcome="error"'), 1);
      assert.equal(count(text, 'holdscope_http_request_duration_seconds', 'route="/api/flags",status="200"'), 1);
      // The route's pattern, never the request id of the path.
      assert.equal(count(text, 'holdscope_http_request_duration_seconds', 'route="/api/lifecycles/:requestId",status="404"'), 1);
      assert.doesNotMatch(text, /no-such-request/);
      assert.equal(count(text, 'holdscope_http_request_duration_seconds', 'route="/api/queries/:name",status="400"'), 1);
      assert.equal(count(text, 'holdscope_http_request_duration_seconds', `route="/api/queries/:name",status="${failed.status}"`), 1);
    } finally {
      await api.close();
      await broken.close();
    }
    // Closed servers observe nothing more.
    await runQuery(client, database, 'kv_pinned', { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z' });
    assert.equal(count(await registry.metrics(), 'holdscope_query_duration_seconds', 'query="kv_pinned",outcome="ok"'), 1);
  });

  it('treats a parameter carrying SQL as a value', async () => {
    const database = randomDatabase('inject');
    await migrate(client, { database, retentionDays: 30 });
    const evil = "x'; DROP TABLE spans; --";
    assert.deepEqual(await runQuery(client, database, 'lifecycles_by_request', { request_id: evil }), []);
    const api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    try {
      const res = await fetch(`http://127.0.0.1:${api.port}/api/lifecycles/${encodeURIComponent(evil)}`);
      assert.equal(res.status, 404);
      const lookup = (query: string) => fetch(`http://127.0.0.1:${api.port}/api/lifecycles?${query}`);
      const odd = [evil, "back\\slash'", '[]', 'two\nlines'];
      const batch = await lookup(odd.map((id) => `request_id=${encodeURIComponent(id)}`).join('&'));
      assert.equal(batch.status, 200);
      assert.deepEqual(await batch.json(), { lifecycles: [], not_found: odd });
      for (const [query, reason] of [
        ['', /request_id is required/],
        ['cluster=a', /request_id is required/],
        ['request_id=a&colour=red', /unknown parameter\(s\) colour/],
        ['request_id=a&cluster=a&cluster=b', /parameter .{0,4}cluster.{0,4} must be given once/],
        [
          Array.from({ length: MAX_LOOKUP_REQUEST_IDS + 1 }, (_, i) => `request_id=r${i}`).join('&'),
          /at most 200 request ids per lookup, got 201/,
        ],
      ] as const) {
        const refused = await lookup(query);
        assert.equal(refused.status, 400, query.slice(0, 60));
        assert.match(JSON.stringify(await refused.json()), reason);
      }
      // The same query by name takes the list as ClickHouse text: one that is not a list is the caller's error.
      const notAList = await fetch(`http://127.0.0.1:${api.port}/api/queries/lifecycles_by_requests?request_ids=not-a-list`);
      assert.equal(notAList.status, 400);
      assert.match(JSON.stringify(await notAList.json()), /request_ids: expected a list of strings/);
      const asText = await fetch(
        `http://127.0.0.1:${api.port}/api/queries/lifecycles_by_requests?request_ids=${encodeURIComponent(formatStringListText([evil]))}`,
      );
      assert.equal(asText.status, 200, await asText.clone().text());
      assert.deepEqual(((await asText.json()) as { rows: unknown[] }).rows, []);
      const flagsRes = await fetch(
        `http://127.0.0.1:${api.port}/api/flags?from=${encodeURIComponent('2026-01-01T00:00:00Z')}&to=${encodeURIComponent('2026-01-02T00:00:00Z')}&cluster=${encodeURIComponent(evil)}`,
      );
      assert.equal(flagsRes.status, 200);
      assert.deepEqual(((await flagsRes.json()) as { flags: Flag[] }).flags, []);
      const base = `http://127.0.0.1:${api.port}`;
      for (const [path, reason] of [
        ['/api/queries/no_such_query', /unknown query/],
        ['/api/queries/longest_holds?from=yesterday&to=2026-01-01T00:00:00Z', /from: expected an ISO 8601 time/],
        ['/api/queries/longest_holds?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&limit=1%3B%20DROP', /limit: expected an integer/],
        [
          '/api/queries/longest_holds?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&max_rows=0',
          /max_rows: expected an integer from 1 to 1000000/,
        ],
        [
          '/api/queries/longest_holds?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&max_rows=1000001',
          /max_rows: expected an integer from 1 to 1000000/,
        ],
        [
          '/api/queries/longest_holds?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&max_rows=1%3B%20DROP',
          /max_rows: expected an integer/,
        ],
      ] as const) {
        const bad = await fetch(base + path);
        assert.equal(bad.status, 400, path);
        assert.match(((await bad.json()) as { error: string }).error, reason);
      }
      // Without from (or to), the 15 minutes before to (or now): an alert's "see /api/flags" works as written.
      const lastQuarter = (await (await fetch(`${base}/api/flags?to=2026-01-01T00:00:00Z`)).json()) as { from: string; to: string };
      assert.deepEqual([lastQuarter.from, lastQuarter.to], ['2025-12-31T23:45:00.000Z', '2026-01-01T00:00:00.000Z']);
      const rows = await fetch(`${base}/api/queries/request_timeline?request_id=${encodeURIComponent(evil)}`);
      assert.equal(rows.status, 200);
      assert.deepEqual(await rows.json(), { rows: [], truncated: false, max_rows: 10_000 });
    } finally {
      await api.close();
    }
    const tables = await client.query({
      query: `SELECT name FROM system.tables WHERE database = {db:String} AND name = 'spans'`,
      query_params: { db: database },
      format: 'JSONEachRow',
    });
    assert.equal(((await tables.json()) as unknown[]).length, 1, 'the spans table is still there');
  });
});
