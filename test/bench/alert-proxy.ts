/**
 * The proxy in front of the bench's Alertmanager, run on a worker thread of its own (test/bench/violation-alerts.ts).
 * On the bench's main thread it shared an event loop with the load it times (20,000 spans/s of OTLP requests sent and
 * collected there): each POST waited for that loop, and the pipeline's POSTs to Alertmanager took 641 ms on average
 * at full load against 17 ms at 5,000 spans/s. A real Alertmanager sits behind no such loop.
 *
 * Tells its parent, with absolute times (performance.timeOrigin + performance.now(), comparable across threads):
 * `{ kind: 'listening', port }`, `{ kind: 'post', ok }` for each POST of alerts, and `{ kind: 'firing', engine, atMs }`
 * for each probe engine's firing alert in a POST Alertmanager accepted.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';

export interface AlertProxyMessage {
  kind: 'listening' | 'post' | 'firing';
  port?: number;
  ok?: boolean;
  engine?: string;
  atMs?: number;
}

interface PostedAlert {
  labels?: Record<string, string>;
  endsAt?: string;
}

const { target, enginePrefix } = workerData as { target: string; enginePrefix: string };
const tell = (message: AlertProxyMessage) => parentPort?.postMessage(message);

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const headers: Record<string, string> = {};
    if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
    if (req.headers.authorization) headers.authorization = req.headers.authorization;
    const method = req.method ?? 'GET';
    fetch(`${target}${req.url ?? '/'}`, { method, headers, body: method === 'GET' || method === 'HEAD' ? undefined : body })
      .then(async (answer) => {
        const answeredAt = performance.timeOrigin + performance.now();
        const text = await answer.arrayBuffer();
        if (method === 'POST' && req.url?.startsWith('/api/v2/alerts')) {
          tell({ kind: 'post', ok: answer.ok });
          if (answer.ok) for (const engine of firingProbes(body)) tell({ kind: 'firing', engine, atMs: answeredAt });
        }
        res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' });
        res.end(Buffer.from(text));
      })
      .catch((error: unknown) => {
        res.writeHead(502);
        res.end(error instanceof Error ? error.message : String(error));
      });
  });
});

/** The probe engines of the firing alerts in a POST's body (endsAt ahead: a resolved one ends at or before now). */
function firingProbes(body: Buffer): string[] {
  let alerts: PostedAlert[];
  try {
    alerts = JSON.parse(body.toString('utf8')) as PostedAlert[];
  } catch {
    return [];
  }
  const now = Date.now();
  return (Array.isArray(alerts) ? alerts : [])
    .filter((a) => (a.labels?.decode_engine ?? '').startsWith(enginePrefix) && Date.parse(a.endsAt ?? '') > now)
    .map((a) => a.labels!.decode_engine!);
}

parentPort?.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  server.closeAllConnections();
  server.close(() => parentPort?.close());
});

server.listen(0, '127.0.0.1', () => tell({ kind: 'listening', port: (server.address() as AddressInfo).port }));
