import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { listIncidents, VIOLATION_ALERT_NAMES, type Flag, type Incident } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

type ApiIncident = Incident & { alertname: string; runbook: string };
interface IncidentsBody {
  from: string;
  to: string;
  incidents: ApiIncident[];
  total: number;
}

describe('/api/incidents and /runbooks over HTTP (chdb embedded)', { timeout: 120_000 }, () => {
  let client: ClickHouseClient;
  let database = '';
  let server: { port: number; close(): Promise<void> };
  let base = '';
  let startTimeMs = 0;
  const get = async <T>(path: string): Promise<{ status: number; body: T }> => {
    const res = await fetch(base + path);
    return { status: res.status, body: (await res.json()) as T };
  };

  before(async () => {
    client = await embeddedClickHouse();
    database = randomDatabase('incapi');
    // Five minutes ago: inside the default window of a read that names no range.
    ({ startTimeMs } = await loadScenario(client, database, 'mixed', 45, (c) => void (c.requests = 400), Date.now() - 5 * 60_000));
    server = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    base = `http://127.0.0.1:${server.port}`;
  });
  after(async () => {
    await server?.close();
    await client?.close();
  });

  it("answers the incidents of a range as listIncidents has them, with each one's alert and runbook anchor", async () => {
    const from = new Date(startTimeMs - 60_000).toISOString();
    const to = new Date(Date.now() + 60_000).toISOString();
    const { status, body } = await get<IncidentsBody>(`/api/incidents?from=${from}&to=${to}`);
    assert.equal(status, 200);
    const direct = await listIncidents(client, database, { from, to });
    assert.ok(direct.incidents.length >= 3, `${direct.incidents.length} incidents`);
    assert.deepEqual(body, {
      from,
      to,
      total: direct.total,
      incidents: direct.incidents.map((i) => ({
        ...i,
        alertname: VIOLATION_ALERT_NAMES[i.kind],
        runbook: `/runbooks#${VIOLATION_ALERT_NAMES[i.kind].toLowerCase()}`,
      })),
    });
    // A cluster: its incidents alone; an unknown one (or one carrying markup), none.
    const cluster = body.incidents[0]?.cluster ?? '';
    const one = await get<IncidentsBody>(`/api/incidents?from=${from}&to=${to}&cluster=${encodeURIComponent(cluster)}`);
    assert.deepEqual(
      one.body.incidents.map((i) => i.id),
      body.incidents.filter((i) => i.cluster === cluster).map((i) => i.id),
    );
    const none = await get<IncidentsBody>(`/api/incidents?from=${from}&to=${to}&cluster=${encodeURIComponent('<x>')}`);
    assert.deepEqual([none.status, none.body.incidents, none.body.total], [200, [], 0]);
  });

  it('without from and to reads the last 15 minutes, as /api/flags does; each violation flag names its incident', async () => {
    const before = Date.now();
    const { status, body } = await get<IncidentsBody>('/api/incidents');
    assert.equal(status, 200);
    const [fromMs, toMs] = [Date.parse(body.from), Date.parse(body.to)];
    assert.equal(toMs - fromMs, 15 * 60_000);
    assert.ok(toMs >= before && toMs <= Date.now(), 'to is now');
    assert.ok(body.incidents.length > 0, 'the scenario of five minutes ago is in it');
    const direct = await listIncidents(client, database, { from: body.from, to: body.to });
    assert.deepEqual(
      body.incidents.map((i) => [i.id, i.violations]),
      direct.incidents.map((i) => [i.id, i.violations]),
    );

    const flags = await get<{ from: string; to: string; flags: (Flag & { incident?: string })[] }>(
      `/api/flags?from=${body.from}&to=${body.to}&limit_per_kind=99999`,
    );
    assert.equal(flags.status, 200);
    const defaulted = await get<{ from: string; to: string }>('/api/flags');
    assert.equal(defaulted.status, 200);
    assert.equal(Date.parse(defaulted.body.to) - Date.parse(defaulted.body.from), 15 * 60_000);
    // The flags of an incident are as many as its violations, and each says which incident it is in.
    const byIncident = new Map<string, number>();
    for (const f of flags.body.flags)
      if (f.request_id !== undefined && f.kind !== 'open_hold') {
        assert.ok(f.incident, `${f.kind} ${f.request_id} names its incident`);
        byIncident.set(f.incident, (byIncident.get(f.incident) ?? 0) + 1);
      }
    assert.deepEqual(byIncident, new Map(body.incidents.map((i) => [i.id, i.violations])));
    for (const i of body.incidents)
      for (const e of i.examples) {
        const flag = flags.body.flags.find((f) => f.request_id === e.request_id && f.generation === e.generation && f.kind === i.kind);
        assert.equal(flag?.incident, i.id, `example ${e.request_id} of ${i.id}`);
      }
  });

  it('refuses what /api/flags refuses, naming it', async () => {
    for (const [query, reason] of [
      ['from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z', /to must be after from/],
      ['from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z', /a read may cover at most 7 days/],
      ['from=yesterday', /from: expected an ISO 8601 time/],
      ['colour=red', /unknown parameter\(s\) colour; \/api\/incidents takes from, to, cluster/],
      ['cluster=a&cluster=b', /must be given once/],
    ] as const) {
      const { status, body } = await get<{ error: string }>(`/api/incidents?${query}`);
      assert.equal(status, 400, query);
      assert.match(body.error, reason);
    }
  });

  it('serves docs/runbooks.md with every "## " heading at its GitHub anchor, escaped, without the token', async () => {
    const guarded = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog, authToken: 's3cret' });
    try {
      const res = await fetch(`http://127.0.0.1:${guarded.port}/runbooks`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
      assert.match(res.headers.get('content-security-policy') ?? '', /script-src 'self'/);
      const html = await res.text();
      assert.doesNotMatch(html, /<script/, 'the document page loads no script');
      const markdown = readFileSync(new URL('../../docs/runbooks.md', import.meta.url), 'utf8');
      const headings = [...markdown.matchAll(/^## (.+)$/gm)].map((m) => (m[1] ?? '').trim());
      assert.ok(headings.length >= 5, `${headings.length} sections`);
      for (const heading of headings) {
        const anchor = heading
          .toLowerCase()
          .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, '')
          .replace(/ /g, '-');
        assert.match(html, new RegExp(`<h2 id="${anchor}">`), `#${anchor} (${heading})`);
      }
      // The alerts' runbook_url form: /runbooks#<alertname lowercased>.
      if (headings.includes('HoldscopeLateWrite')) assert.match(html, /<h2 id="holdscopelatewrite">HoldscopeLateWrite<\/h2>/);
      // The data still needs the token.
      assert.equal((await fetch(`http://127.0.0.1:${guarded.port}/api/incidents`)).status, 401);
    } finally {
      await guarded.close();
    }
  });
});
