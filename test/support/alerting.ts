// The real alerting parts, from Debian's binaries: Prometheus scraping and evaluating the rules, Alertmanager routing to a
// webhook, and the webhook recording what arrived and when. Each gets its own temporary folder and free port.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { detachWithStderrTail } from './detached.ts';

export const PROMETHEUS = '/usr/bin/prometheus';
export const ALERTMANAGER = '/usr/bin/prometheus-alertmanager';

/** An alert as Alertmanager's webhook sends it. */
export interface WebhookAlert {
  status: 'firing' | 'resolved';
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt: string;
}

export interface Webhook {
  url: string;
  /** Every alert received, with the time its notification arrived (epoch ms). */
  received: { at: number; alert: WebhookAlert }[];
  close(): Promise<void>;
}

export interface Service {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function startWebhook(): Promise<Webhook> {
  const received: Webhook['received'] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const at = Date.now();
      try {
        for (const alert of (JSON.parse(body) as { alerts: WebhookAlert[] }).alerts) received.push({ at, alert });
      } catch {
        // Not a notification: nothing to record.
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function waitReady(url: string, child: ChildProcessWithoutNullStreams, stderr: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${url}: exited with ${child.exitCode}${stderr()}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${url}: not ready within 30 s${stderr()}`);
}

/** Runs `binary` until stopped; `dir` holds its configuration and data, removed once it has stopped. */
async function run(binary: string, args: string[], readyPath: string, port: number, dir: string): Promise<Service> {
  const child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const stderr = detachWithStderrTail(child);
  child.stdout.resume();
  const url = `http://127.0.0.1:${port}`;
  await waitReady(`${url}${readyPath}`, child, stderr);
  return {
    url,
    port,
    stop: async () => {
      if (child.exitCode !== null) return rmSync(dir, { recursive: true, force: true });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Alertmanager sending every alert to the webhook at once (no grouping wait), resolved ones too; clustering off. */
export async function startAlertmanager(webhookUrl: string): Promise<Service> {
  const dir = mkdtempSync(join(tmpdir(), 'holdscope-am-'));
  const config = join(dir, 'alertmanager.yml');
  writeFileSync(
    config,
    [
      'route:',
      '  receiver: webhook',
      "  group_by: ['...']",
      '  group_wait: 0s',
      '  group_interval: 1s',
      '  repeat_interval: 1h',
      'receivers:',
      '  - name: webhook',
      '    webhook_configs:',
      `      - url: ${JSON.stringify(webhookUrl)}`,
      '        send_resolved: true',
      '',
    ].join('\n'),
  );
  const port = await freePort();
  return run(
    ALERTMANAGER,
    [
      `--config.file=${config}`,
      `--storage.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--cluster.listen-address=',
    ],
    '/-/ready',
    port,
    dir,
  );
}

/** Prometheus scraping `targets` as job "holdscope" and evaluating `rulesFile`, every `intervalSeconds`. */
export async function startPrometheus(options: {
  targets: string[];
  rulesFile: string;
  alertmanager: Service;
  intervalSeconds?: number;
}): Promise<Service> {
  const dir = mkdtempSync(join(tmpdir(), 'holdscope-prom-'));
  const interval = `${options.intervalSeconds ?? 5}s`;
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    JSON.stringify({
      global: { scrape_interval: interval, evaluation_interval: interval },
      rule_files: [options.rulesFile],
      alerting: { alertmanagers: [{ static_configs: [{ targets: [`127.0.0.1:${options.alertmanager.port}`] }] }] },
      scrape_configs: [{ job_name: 'holdscope', static_configs: [{ targets: options.targets }] }],
    }),
  );
  const port = await freePort();
  return run(
    PROMETHEUS,
    [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    '/-/ready',
    port,
    dir,
  );
}

/** Prometheus's alerts now, pending and firing. */
export async function prometheusAlerts(
  prometheus: Service,
): Promise<{ state: 'pending' | 'firing'; labels: Record<string, string>; activeAt: string }[]> {
  const res = await fetch(`${prometheus.url}/api/v1/alerts`);
  const body = (await res.json()) as {
    data: { alerts: { state: 'pending' | 'firing'; labels: Record<string, string>; activeAt: string }[] };
  };
  return body.data.alerts;
}
