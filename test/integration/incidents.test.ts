import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { buildScenario } from '../../emitter/index.ts';
import { listIncidents, VIOLATION_KINDS, type ViolationKind } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const isViolation = (kind: string): kind is ViolationKind => (VIOLATION_KINDS as readonly string[]).includes(kind);

describe('incidents against the simulator ground truth', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  it('mixed: every violation is in the incident of its kind and culprit, counted once, with its versions', async () => {
    const database = randomDatabase('incidents');
    const run = await loadScenario(client, database, 'mixed', 43, (c) => {
      c.requests = 900;
    });
    const window = { from: new Date(run.startTimeMs - 60_000).toISOString(), to: new Date(Date.now() + 60_000).toISOString() };
    const { incidents, total } = await listIncidents(client, database, window, { maxIncidents: 10_000, examples: 3 });
    const config = buildScenario('mixed', 43).config;
    const version = new Map([...config.prefill, ...config.decode].map((e) => [e.id, e.version]));

    const expected = new Map<string, number>();
    const requestsOf = new Map<string, Set<string>>();
    for (const t of run.truth)
      for (const kind of t.flags.filter(isViolation)) {
        // A generation no prefill rank sent to has no prefill span: its record cannot name the prefill engine.
        const prefill = t.transfers.ok + t.transfers.failed + t.transfers.timeout > 0 ? t.prefill_engine : '';
        const key = JSON.stringify([t.cluster, kind, t.decode_engine, version.get(t.decode_engine), prefill, version.get(prefill) ?? '']);
        expected.set(key, (expected.get(key) ?? 0) + 1);
        requestsOf.set(key, (requestsOf.get(key) ?? new Set()).add(`${t.request_id}/${t.generation}`));
      }
    const got = new Map(
      incidents.map((i) => [
        JSON.stringify([
          i.cluster,
          i.kind,
          i.culprit.decode_engine,
          i.culprit.decode_version,
          i.culprit.prefill_engine,
          i.culprit.prefill_version,
        ]),
        i.violations,
      ]),
    );
    assert.ok(expected.size >= 6, `the scenario has several incidents (${expected.size})`);
    assert.deepEqual(got, expected);
    assert.equal(total, incidents.length);
    assert.equal(new Set(incidents.map((i) => i.id)).size, incidents.length, 'ids are unique');

    for (const incident of incidents) {
      const key = JSON.stringify([
        incident.cluster,
        incident.kind,
        incident.culprit.decode_engine,
        incident.culprit.decode_version,
        incident.culprit.prefill_engine,
        incident.culprit.prefill_version,
      ]);
      assert.equal(
        incident.sparkline.counts.reduce((a, b) => a + b, 0),
        incident.violations,
        `sparkline of ${key}`,
      );
      assert.ok(incident.examples.length >= 1 && incident.examples.length <= 3);
      for (const e of incident.examples)
        assert.ok(requestsOf.get(key)?.has(`${e.request_id}/${e.generation}`), `example ${e.request_id} of ${key}`);
      assert.ok(Date.parse(incident.firstSeen) <= Date.parse(incident.lastSeen));
      assert.match(incident.summary, new RegExp(`^${incident.violations} .*decode ${incident.culprit.decode_engine} \\(`));
    }

    // Capped: the most recent incidents, and the total still counts them all.
    const capped = await listIncidents(client, database, window, { maxIncidents: 2 });
    assert.equal(capped.incidents.length, 2);
    assert.equal(capped.total, incidents.length);
    assert.deepEqual(
      capped.incidents.map((i) => i.id),
      [...incidents]
        .sort((a, b) => Date.parse(b.lastSeen) - Date.parse(a.lastSeen))
        .slice(0, 2)
        .map((i) => i.id),
    );
  });

  it('steady: no incidents', async () => {
    const database = randomDatabase('incidents');
    const run = await loadScenario(client, database, 'steady', 44, (c) => {
      c.requests = 300;
    });
    const window = { from: new Date(run.startTimeMs - 60_000).toISOString(), to: new Date(Date.now() + 60_000).toISOString() };
    assert.deepEqual(await listIncidents(client, database, window), { incidents: [], total: 0 });
  });
});
