import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { createViolationAlerts, violationAlertsConfigSchema, type Delivery, type ViolationAlerts } from '../../dashboards/index.ts';
import { buildScenario, runSimulation } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue, migrate } from '../../pipeline/index.ts';
import { listIncidents, openReadClient, VIOLATION_ALERT_NAMES, type Incident } from '../../queries/index.ts';
import { detachWithStderrTail } from '../support/detached.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';

// Debian's prometheus-alertmanager package (scripts/ensure-deps.mjs installs it for `npm test`).
const ALERTMANAGER = existsSync('/usr/bin/prometheus-alertmanager') ? '/usr/bin/prometheus-alertmanager' : 'alertmanager';
const EXTERNAL_URL = 'https://holdscope.example/hs';

interface AmAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt: string;
  generatorURL: string;
  status: { state: string };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A real Alertmanager on its own port and storage, clustering off, routing everything to a receiver that sends nothing. */
class Alertmanager {
  readonly url: string;
  private constructor(
    readonly port: number,
    private readonly stopFn: () => Promise<void>,
    /** Sends the process a signal: SIGSTOP makes an Alertmanager that accepts connections and never answers. */
    readonly signal: (name: NodeJS.Signals) => void,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  static async start(port?: number): Promise<Alertmanager> {
    const chosen = port ?? (await freePort());
    const dir = mkdtempSync(join(tmpdir(), 'holdscope-am-'));
    writeFileSync(join(dir, 'am.yml'), "route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n");
    const child = spawn(ALERTMANAGER, [
      `--config.file=${join(dir, 'am.yml')}`,
      `--storage.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${chosen}`,
      '--cluster.listen-address=',
    ]);
    const stderr = detachWithStderrTail(child);
    let exited = false;
    child.once('exit', () => (exited = true));
    const stop = async () => {
      if (!exited) {
        const gone = new Promise((resolve) => child.once('exit', resolve));
        child.ref(); // detached so as not to keep the tests alive; this wait must
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    };
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (exited) throw new Error(`alertmanager exited${stderr()}`);
      const ready = await fetch(`http://127.0.0.1:${chosen}/-/ready`).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) return new Alertmanager(chosen, stop, (name) => child.kill(name));
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`alertmanager not ready within 15 s${stderr()}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The active alerts (GET /api/v2/alerts lists neither resolved nor expired ones). */
  async alerts(): Promise<AmAlert[]> {
    const response = await fetch(`${this.url}/api/v2/alerts`);
    assert.equal(response.status, 200);
    return (await response.json()) as AmAlert[];
  }

  /** Polls until `done` holds of the active alerts; returns them and when it first held (Date.now()). */
  async waitFor(done: (alerts: AmAlert[]) => boolean, timeoutMs: number, what: string): Promise<{ alerts: AmAlert[]; atMs: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const alerts = await this.alerts();
      if (done(alerts)) return { alerts, atMs: Date.now() };
      if (Date.now() > deadline) assert.fail(`${this.url}: ${what} not within ${timeoutMs} ms; active: ${alerts.length}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  stop(): Promise<void> {
    return this.stopFn();
  }
}

const alertKey = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).sort());
const unknownIfEmpty = (v: string) => (v === '' ? 'unknown' : v);
function expectedLabels(i: Incident): Record<string, string> {
  return {
    alertname: VIOLATION_ALERT_NAMES[i.kind],
    severity: 'critical',
    cluster: i.cluster,
    kind: i.kind,
    decode_engine: unknownIfEmpty(i.culprit.decode_engine),
    decode_version: unknownIfEmpty(i.culprit.decode_version),
    prefill_engine: unknownIfEmpty(i.culprit.prefill_engine),
    prefill_version: unknownIfEmpty(i.culprit.prefill_version),
    backend: unknownIfEmpty(i.culprit.backend),
  };
}

async function metric(alerts: ViolationAlerts, name: string, labels: Record<string, string> = {}): Promise<number> {
  const found = (await alerts.registry.getMetricsAsJSON()).find((m) => m.name === name);
  const values = (found?.values ?? []) as { value: number; labels: Record<string, string | number> }[];
  return values.filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x)).reduce((n, v) => n + v.value, 0);
}

/** Polls a metric of the push until `done` holds of it. */
async function waitForMetric(alerts: ViolationAlerts, name: string, labels: Record<string, string>, done: (v: number) => boolean) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const value = await metric(alerts, name, labels);
    if (done(value)) return value;
    assert.ok(Date.now() < deadline, `${name} ${JSON.stringify(labels)} is ${value}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('violation alerts pushed to a real Alertmanager', { timeout: 120_000 }, () => {
  let client: ClickHouseClient;
  /** The push reads through a client of its own, as in `holdscope start`: on chdb a query waits for the one before it on its client. */
  let readClient: ClickHouseClient;
  const database = randomDatabase('violation_alerts');
  const cluster = `c-${database.slice(-6)}`;
  const started: Alertmanager[] = [];
  const notifiers: ViolationAlerts[] = [];
  const config = (urls: string[], overrides: Record<string, unknown> = {}) =>
    violationAlertsConfigSchema.parse({ alertmanagerUrl: urls.join(','), alertPollMs: 60_000, ...overrides });
  const notifier = (options: Omit<Parameters<typeof createViolationAlerts>[0], 'client' | 'database' | 'log' | 'externalUrl'>) => {
    const n = createViolationAlerts({ client: readClient, database, log: quietLog, externalUrl: EXTERNAL_URL, ...options });
    notifiers.push(n);
    return n;
  };
  const alertmanager = async (port?: number) => {
    const am = await Alertmanager.start(port);
    started.push(am);
    return am;
  };
  /** The incidents as the notifier's lookup sees them. */
  const incidentsNow = async () =>
    (
      await listIncidents(
        client,
        database,
        { from: new Date(Date.now() - 3_600_000).toISOString(), to: new Date(Date.now() + 60_000).toISOString() },
        { maxIncidents: 1000 },
      )
    ).incidents;
  let incidents: Incident[] = [];

  let dataPath = '';
  before(async () => {
    dataPath = mkdtempSync(join(tmpdir(), 'holdscope-chdb-'));
    client = await createClickHouse({ dataPath });
    readClient = await openReadClient({ dataPath });
    await migrate(client, { database, retentionDays: 30 });
  });
  after(async () => {
    await Promise.all(notifiers.map((n) => n.shutdown()));
    await Promise.all(started.map((am) => am.stop()));
    await readClient?.close();
    await client?.close();
    if (dataPath) rmSync(dataPath, { recursive: true, force: true });
  });

  it('a record stored nudges the push: the alerts arrive long before the poll interval (60 s)', async () => {
    const am = await alertmanager();
    const deliveries: Delivery[] = [];
    const push = notifier({ config: config([am.url]), onDelivered: (d) => deliveries.push(d) });
    push.start();
    await push.lookupNow(); // the empty database: nothing yet, and the next poll is 60 s away

    // The collector and writer of `holdscope start` (in-process queue), the writer nudging the push as in cli/start.ts.
    const storedAt: number[] = [];
    const metrics = createPipelineMetrics();
    const onRecordsStored = () => {
      storedAt.push(Date.now());
      push.nudge();
    };
    const writer = createWriter(client, { database, maxBatchRows: 50_000, lingerMs: 20, onRecordsStored }, metrics, quietLog);
    const queue = new InProcessQueue(writer, { maxPendingSpans: 1_000_000, timeoutMs: 60_000, metrics, log: quietLog });
    const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
    const port = await collector.start();
    try {
      const scenario = buildScenario('mixed', 51);
      scenario.config.idPrefix = `va-${database}`;
      scenario.config.cluster = cluster;
      scenario.config.requests = 400;
      // Recent: the lookup covers the quiet period and 15 minutes before it, by the lifecycles' last spans.
      const summary = await runSimulation({
        config: scenario.config,
        endpoint: `http://127.0.0.1:${port}`,
        startTimeMs: Date.now() - 120_000,
        pace: 'fast',
      });
      assert.equal(summary.spansFailed, 0);
      await writer.flush();
    } finally {
      await collector.shutdown();
    }
    const lastStored = Math.max(...storedAt);
    incidents = await incidentsNow();
    assert.ok(incidents.length >= 6, `the scenario raises several incidents (${incidents.length})`);
    const { atMs } = await am.waitFor((alerts) => alerts.length === incidents.length, 10_000, 'every incident');
    const lag = atMs - lastStored;
    process.stdout.write(`# nudge: ${incidents.length} incidents active in Alertmanager ${lag} ms after the last record was stored\n`);
    assert.ok(lag < 2000, `arrived ${lag} ms after the last record was stored`);
    // Every alert Alertmanager accepted: within 2 s of a record stored before it.
    assert.ok(deliveries.length > 0);
    const lags = deliveries.map((d) => d.atMs - Math.max(...storedAt.filter((t) => t <= d.atMs)));
    process.stdout.write(
      `# nudge: ${deliveries.length} POSTs accepted, each ${Math.min(...lags)}..${Math.max(...lags)} ms after a record was stored\n`,
    );
    for (const lag of lags) assert.ok(lag >= 0 && lag < 2000, `a delivery ${lag} ms after the record before it`);
  });

  it('HA pair: each Alertmanager gets every incident, labelled with its culprit, with counts and absolute links', async () => {
    const [a, b] = await Promise.all([alertmanager(), alertmanager()]);
    const push = notifier({ config: config([a!.url, b!.url]) });
    push.start();
    await push.lookupNow();
    const byKey = new Map(incidents.map((i) => [alertKey(expectedLabels(i)), i]));
    for (const am of [a!, b!]) {
      const { alerts } = await am.waitFor((x) => x.length === incidents.length, 5000, 'every incident');
      for (const alert of alerts) {
        const incident = byKey.get(alertKey(alert.labels));
        assert.ok(incident, `an alert of no incident: ${JSON.stringify(alert.labels)}`);
        assert.equal(alert.labels.cluster, cluster);
        assert.equal(alert.status.state, 'active');
        assert.equal(alert.annotations.summary, incident.summary);
        assert.match(alert.annotations.summary ?? '', new RegExp(`^${incident.violations} .* decode ${incident.culprit.decode_engine} `));
        assert.equal(alert.annotations.runbook_url, `${EXTERNAL_URL}/runbooks#${alert.labels.alertname?.toLowerCase()}`);
        const link = new URL(alert.annotations.incident_url ?? '');
        assert.equal(alert.generatorURL, link.href);
        assert.equal(`${link.origin}${link.pathname}`, `${EXTERNAL_URL}/`);
        assert.equal(link.hash, `#incident-${incident.id}`);
        assert.equal(link.searchParams.get('cluster'), cluster);
        const [from, to] = [Date.parse(link.searchParams.get('from') ?? ''), Date.parse(link.searchParams.get('to') ?? '')];
        assert.ok(from < Date.parse(incident.firstSeen) && to > Date.parse(incident.lastSeen), 'the link covers the incident');
        assert.ok(Date.parse(alert.endsAt) > Date.now() + 60_000, 'active for four resends');
      }
      // (Alertmanager lists the alerts a moment before its answer to the POST reaches the push.)
      await waitForMetric(
        push,
        'holdscope_violation_alerts_sent_total',
        { alertmanager: am.url, state: 'firing' },
        (n) => n === incidents.length,
      );
    }
    assert.equal(await metric(push, 'holdscope_violation_push_enabled'), 1);
    assert.equal(await metric(push, 'holdscope_violation_alerts_active'), incidents.length);
    assert.equal(await metric(push, 'holdscope_violation_alerts_undelivered_total'), 0);
  });

  it('one Alertmanager down: the other gets every alert at once; the failures are counted and retried', async () => {
    const up = await alertmanager();
    const downPort = await freePort();
    const downUrl = `http://127.0.0.1:${downPort}`;
    const push = notifier({ config: config([downUrl, up.url]) });
    const began = Date.now();
    push.start();
    await up.waitFor((x) => x.length === incidents.length, 2000, 'every incident despite the other being down');
    process.stdout.write(`# one down: the other Alertmanager had all ${incidents.length} alerts ${Date.now() - began} ms after start\n`);
    await waitForMetric(push, 'holdscope_violation_alerts_undelivered_total', { alertmanager: downUrl }, (n) => n >= incidents.length);
    assert.equal(await metric(push, 'holdscope_violation_alerts_undelivered_total', { alertmanager: up.url }), 0);
    // It comes up: the alerts waiting for it are retried (no new lookup: the poll is 60 s away).
    const late = await alertmanager(downPort);
    const { atMs } = await late.waitFor((x) => x.length === incidents.length, 15_000, 'the retried alerts');
    process.stdout.write(`# one down: delivered to the restarted Alertmanager ${atMs - began} ms after start\n`);
    await waitForMetric(
      push,
      'holdscope_violation_alerts_sent_total',
      { alertmanager: downUrl, state: 'firing' },
      (n) => n === incidents.length,
    );
  });

  it('one Alertmanager hung (SIGSTOP): the other is not held back; the POSTs time out, are counted, and retried', async () => {
    const [hung, up] = await Promise.all([alertmanager(), alertmanager()]);
    hung.signal('SIGSTOP');
    const push = notifier({ config: config([hung.url, up.url], { alertPushTimeoutMs: 500 }) });
    const began = Date.now();
    push.start();
    await up.waitFor((x) => x.length === incidents.length, 1000, 'every incident despite the other hanging');
    await waitForMetric(push, 'holdscope_violation_alerts_undelivered_total', { alertmanager: hung.url }, (n) => n >= incidents.length);
    hung.signal('SIGCONT');
    const { atMs } = await hung.waitFor((x) => x.length === incidents.length, 15_000, 'the retried alerts');
    process.stdout.write(`# hung: delivered to the resumed Alertmanager ${atMs - began} ms after start\n`);
  });

  it('quiet for alertQuietMs: every alert is sent resolved and leaves the active alerts', async () => {
    const am = await alertmanager();
    const lastComputed = Math.max(...incidents.map((i) => Date.parse(i.lastComputedAt)));
    const quietMs = 3000;
    // Fire as of a second after the last record was stored, then resolve as of now, once that is quiet for 3 s.
    let clock = lastComputed + 1000;
    const push = notifier({ config: config([am.url], { alertQuietMs: quietMs }), now: () => clock });
    push.start();
    await push.lookupNow();
    await am.waitFor((x) => x.length === incidents.length, 5000, 'every incident firing');
    const wait = lastComputed + quietMs + 100 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    clock = Date.now();
    await push.lookupNow();
    await am.waitFor((x) => x.length === 0, 5000, 'every incident resolved');
    await waitForMetric(push, 'holdscope_violation_alerts_sent_total', { state: 'resolved' }, (n) => n === incidents.length);
    assert.equal(await metric(push, 'holdscope_violation_alerts_active'), 0);
    // Resolved once: a later lookup sends nothing more.
    clock = Date.now();
    await push.lookupNow();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await metric(push, 'holdscope_violation_alerts_sent_total', { state: 'resolved' }), incidents.length);
  });
});
