// The alerts as an SRE deploys them: `holdscope start` on a simulated scenario, the real Prometheus scraping it and
// evaluating the shipped rules every 5 s, holdscope pushing its violation alerts, and the real Alertmanager sending both
// to a webhook. Each scenario's promised alerts (emitter/sim/scenarios.ts `expectedAlerts`, the table of
// docs/simulator.md) must arrive; no other critical alert may even go pending.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildScenario, type ScenarioName } from '../../emitter/index.ts';
import {
  freePort,
  prometheusAlerts,
  startAlertmanager,
  startPrometheus,
  startWebhook,
  type Service,
  type Webhook,
} from '../support/alerting.ts';
import { startHoldscope, stopHoldscope, type StartedHoldscope } from '../support/start-process.ts';

// Absolute: Prometheus reads rule files relative to its own config file.
const RULES = fileURLToPath(new URL('../../dashboards/alerts/holdscope.rules.yml', import.meta.url));

/**
 * How long a scenario may take to raise everything it promises. The slowest promised alerts (OpenHolds, TimeoutHeavy
 * in mixed) arrived after 169-209 s on this project's 2-core machines and, in a slower hour, not within 240 s; the
 * budget only lengthens a run whose alerts are late.
 */
const BUDGET_MS = 360_000;
const QUIET_WATCH_MS = 150_000;

interface Run {
  scenario: ScenarioName;
  holdscope: StartedHoldscope;
  externalUrl: string;
  startedAt: number;
  /** Critical alerts Prometheus had pending or firing for this instance, by name. */
  criticalSeen: Set<string>;
}

describe('alerts end to end with Prometheus and Alertmanager', () => {
  let webhook: Webhook;
  let alertmanager: Service;
  const services: Service[] = [];
  const runs: Run[] = [];

  before(async () => {
    webhook = await startWebhook();
    alertmanager = await startAlertmanager(webhook.url);
    services.push(alertmanager);
  });
  after(async () => {
    await Promise.all(runs.map((run) => stopHoldscope(run.holdscope.child, 20_000)));
    for (const service of services.reverse()) await service.stop();
    await webhook?.close();
  });

  async function launch(scenarios: ScenarioName[]): Promise<{ prometheus: Service; runs: Run[] }> {
    const started: Run[] = [];
    for (const scenario of scenarios) {
      // The external URL names the process: the pushed alerts' links say which run sent them.
      const httpPort = await freePort();
      const externalUrl = `http://127.0.0.1:${httpPort}`;
      const holdscope = await startHoldscope(['--scenario', scenario, '--seed', '2612', '--http-port', String(httpPort)], {
        HOLDSCOPE_ALERTMANAGER_URLS: alertmanager.url,
        HOLDSCOPE_EXTERNAL_URL: externalUrl,
      });
      started.push({ scenario, holdscope, externalUrl, startedAt: Date.now(), criticalSeen: new Set() });
    }
    runs.push(...started);
    const prometheus = await startPrometheus({
      targets: started.map((r) => `127.0.0.1:${r.holdscope.httpPort}`),
      rulesFile: RULES,
      alertmanager,
    });
    services.push(prometheus);
    return { prometheus, runs: started };
  }

  /** The alerts of one run that reached the webhook: pushed ones by their link, rule ones by their instance. */
  function arrivedFor(run: Run): Map<string, number> {
    const first = new Map<string, number>();
    const instance = `127.0.0.1:${run.holdscope.httpPort}`;
    for (const { at, alert } of webhook.received) {
      if (alert.status !== 'firing') continue;
      const mine = alert.labels.instance === instance || (alert.annotations.incident_url ?? '').startsWith(run.externalUrl);
      const shared = alert.labels.instance === undefined && alert.annotations.incident_url === undefined;
      if (!mine && !shared) continue;
      const name = alert.labels.alertname as string;
      if (!first.has(name)) first.set(name, at - run.startedAt);
    }
    return first;
  }

  async function watch(prometheus: Service, watched: Run[], untilMs: number, done: () => boolean): Promise<void> {
    while (Date.now() < untilMs && !done()) {
      for (const alert of await prometheusAlerts(prometheus)) {
        if (alert.labels.severity !== 'critical') continue;
        for (const run of watched)
          if (alert.labels.instance === `127.0.0.1:${run.holdscope.httpPort}` || alert.labels.instance === undefined)
            run.criticalSeen.add(`${alert.labels.alertname as string} ${alert.state}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }

  /** Stops a pair's processes and its Prometheus: the next pair gets the machine's cores to itself. */
  async function settle(prometheus: Service, started: Run[]): Promise<void> {
    await Promise.all(started.map((run) => stopHoldscope(run.holdscope.child, 20_000)));
    await prometheus.stop();
  }

  function report(t: { diagnostic(message: string): void }, run: Run): void {
    const arrived = [...arrivedFor(run)].sort((a, b) => a[1] - b[1]);
    t.diagnostic(`${run.scenario}: ${arrived.map(([name, ms]) => `${name} ${(ms / 1000).toFixed(0)} s`).join(', ') || 'nothing arrived'}`);
  }

  it('abort-storm and mixed: every promised alert arrives', async (t) => {
    const { prometheus, runs: started } = await launch(['abort-storm', 'mixed']);
    const promised = (run: Run) => buildScenario(run.scenario).expectedAlerts ?? [];
    const allArrived = () => started.every((run) => promised(run).every((name) => arrivedFor(run).has(name)));
    await watch(prometheus, started, Date.now() + BUDGET_MS, allArrived);
    await settle(prometheus, started);
    for (const run of started) report(t, run);
    for (const run of started) {
      const arrived = arrivedFor(run);
      assert.deepEqual(
        promised(run).filter((name) => !arrived.has(name)),
        [],
        `${run.scenario}: promised alerts missing\n${run.holdscope.log().slice(-3000)}`,
      );
    }
  });

  it('steady and ack-loss: no critical alert goes even pending', async (t) => {
    const { prometheus, runs: started } = await launch(['steady', 'ack-loss']);
    await watch(prometheus, started, Date.now() + QUIET_WATCH_MS, () => false);
    await settle(prometheus, started);
    for (const run of started) report(t, run);
    for (const run of started) {
      const criticalArrived = [...arrivedFor(run).keys()].filter((name) =>
        webhook.received.some((r) => r.alert.labels.alertname === name && r.alert.labels.severity === 'critical'),
      );
      // holdscope's own liveness alerts are about the process, not the scenario: before Prometheus's first scrape
      // `absent(up)` holds, and a scrape that times out while the embedded ClickHouse keeps the event loop busy makes
      // `up` 0 once. Their `for: 1m` is what keeps that from paging: they may be pending, never firing.
      const liveness = [...run.criticalSeen].filter((seen) => /^Holdscope(Down|Absent) pending$/.test(seen));
      if (liveness.length > 0) t.diagnostic(`${run.scenario}: ${liveness.join(', ')} (process liveness, not the scenario)`);
      const seen = [...run.criticalSeen].filter((s) => !liveness.includes(s));
      assert.deepEqual({ seen, arrived: criticalArrived }, { seen: [], arrived: [] }, run.scenario);
      assert.deepEqual(buildScenario(run.scenario).expectedAlerts, []);
    }
  });
});
