import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { escapeHtml } from '../../dashboards/pages/html.ts';
import { createPdEmitter } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue } from '../../pipeline/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';

const EVIL_ID = '<script>alert(1)</script>';
const EVIL_VICTIM = '"><img src=x onerror=alert(2)>';

/** A request whose id is markup, through the real emitter and collector: a late write lands on a victim's pages. */
async function loadEvilRequest(client: ClickHouseClient, database: string, baseMs: number): Promise<void> {
  const metrics = createPipelineMetrics();
  const writer = createWriter(client, { database, maxBatchRows: 1000, lingerMs: 5 }, metrics, quietLog);
  const queue = new InProcessQueue(writer, { maxPendingSpans: 10_000, timeoutMs: 30_000, metrics, log: quietLog });
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  try {
    const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
    const engine = (attrs: Record<string, string | number>) =>
      new TracerProvider({ resource: resourceFromAttributes({ 'pd.engine.version': 'evil-1', 'pd.transfer.backend': 'mooncake', ...attrs }), spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const decodeProvider = engine({ 'pd.role': 'decode', 'pd.engine.id': 'decode-evil', 'pd.kv.capacity_slots': 65536 });
    const prefillProvider = engine({ 'pd.role': 'prefill', 'pd.engine.id': 'prefill-evil' });
    const decode = createPdEmitter(decodeProvider.getTracer('decode'));
    const prefill = createPdEmitter(prefillProvider.getTracer('prefill'));
    const at = (ms: number) => baseMs + ms;
    const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
    const A = { requestId: EVIL_ID, generation: 0 };
    const B = { requestId: EVIL_VICTIM, generation: 0 };
    decode.kvAllocated(A, { pages: range(14, 44), slots: 31 * 16 }, { time: at(0) });
    decode.holdStarted(A, { expectedRanks: [0], timeoutMs: 300, slots: 31 * 16, pages: range(14, 44) }, { time: at(50) });
    prefill.transferChunk(A, { rank: 0, chunkIndex: 0, pages: range(14, 44), status: 'ok', bytes: 31 * 327_680, decodeEngineId: 'decode-evil' }, { start: at(20), end: at(900) });
    decode.timeoutFired(A, { missingRanks: [0], action: 'release' }, { time: at(350) });
    decode.released(A, { reason: 'timeout', pages: range(14, 44) }, { time: at(351) });
    decode.kvAllocated(B, { pages: range(1, 32), slots: 32 * 16 }, { time: at(400) });
    await Promise.all([decodeProvider.forceFlush(), prefillProvider.forceFlush()]);
    await writer.flush();
  } finally {
    await collector.shutdown();
  }
}

describe('GET /charts/:name.svg renders the page specs on the server', () => {
  let client: ClickHouseClient;
  let server: { port: number; close(): Promise<void> };
  let base = '';
  before(async () => {
    client = await createClickHouse({ dataPath: mkdtempSync(join(tmpdir(), 'holdscope-chdb-')) });
    const database = randomDatabase('charts');
    await loadScenario(client, database, 'mixed', 21, (c) => void (c.requests = 300), Date.now() - 8 * 60_000);
    await loadEvilRequest(client, database, Date.now() - 4 * 60_000);
    server = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    base = `http://127.0.0.1:${server.port}`;
  });
  after(async () => {
    await server?.close();
    await client?.close();
  });

  async function svg(path: string): Promise<string> {
    const res = await fetch(base + path);
    const body = await res.text();
    assert.equal(res.status, 200, `${path}: ${body.slice(0, 300)}`);
    assert.match(res.headers.get('content-type') ?? '', /^image\/svg\+xml/);
    assert.ok(body.startsWith('<svg'), `${path} starts with <svg: ${body.slice(0, 80)}`);
    assert.ok(body.trimEnd().endsWith('</svg>'), `${path} ends with </svg>`);
    assert.match(body, /xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    return body;
  }
  const markPaths = (body: string, role: string) => (body.match(new RegExp(`class="mark-${role} role-mark[^"]*"[^>]*>\\s*<path`, 'g')) ?? []).length;

  it('resolution: stacked bars per engine, the timeout share and its threshold line', async () => {
    const body = await svg('/charts/resolution.svg');
    assert.ok(markPaths(body, 'rect') > 0, 'bar marks');
    assert.ok((body.match(/<path/g) ?? []).length > 20);
    assert.match(body, /timeout threshold 5%/);
  });

  it('tails: quantile points and the hold timeout per prefill engine', async () => {
    const body = await svg('/charts/tails.svg');
    assert.match(body, /prefill-\d/);
    assert.ok((body.match(/<path/g) ?? []).length > 10);
  });

  it('kv_pinned: pinned slots against capacity per decode engine', async () => {
    const body = await svg('/charts/kv_pinned.svg');
    assert.match(body, /decode-\d/);
    assert.ok((body.match(/<path/g) ?? []).length > 5);
  });

  it('timeline: a Gantt of the request spans; a request id carrying markup is escaped text', async () => {
    const body = await svg(`/charts/timeline.svg?request_id=${encodeURIComponent(EVIL_ID)}`);
    assert.ok(!body.includes('<script'), 'no raw <script> in the SVG');
    assert.ok(body.includes('Request &lt;script&gt;alert(1)&lt;/script&gt;'), 'the id shows as escaped text');
    assert.match(body, /late write g0 r0 chunk 0/);
    assert.match(body, /g0 release/);
    assert.ok((body.match(/<path/g) ?? []).length > 5);
  });

  it('answers JSON specs, 400 without a request id, 404 for an unknown chart', async () => {
    const spec = (await (await fetch(`${base}/charts/tails.json`)).json()) as { $schema: string };
    assert.match(spec.$schema, /vega-lite/);
    assert.equal((await fetch(`${base}/charts/timeline.svg`)).status, 400);
    assert.equal((await fetch(`${base}/charts/nope.svg`)).status, 404);
  });

  it('the request page escapes the id and sends a CSP without unsafe-eval or inline scripts', async () => {
    const res = await fetch(`${base}/requests/${encodeURIComponent(EVIL_ID)}`);
    const html = await res.text();
    assert.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.ok(!csp.includes('unsafe-eval'));
    assert.ok(!html.includes(EVIL_ID));
    assert.ok(html.includes(escapeHtml(EVIL_ID)));
    assert.ok(!/<script>/.test(html), 'no inline script element');
    assert.equal(escapeHtml(`<a href="x" onclick='y'>&`), '&#60;a href=&#34;x&#34; onclick=&#39;y&#39;&#62;&#38;');
  });

  it('optional token authentication, GET only', async () => {
    const secured = await startHttpServer({ port: 0, host: '127.0.0.1', client, database: 'none', log: quietLog, authToken: 's3cret' });
    try {
      const b = `http://127.0.0.1:${secured.port}`;
      assert.equal((await fetch(`${b}/`)).status, 401);
      assert.equal((await fetch(`${b}/`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
      assert.equal((await fetch(`${b}/`, { headers: { authorization: 'Bearer s3cret' } })).status, 200);
      assert.equal((await fetch(`${b}/?token=s3cret`)).status, 200);
      // The token is taken out of the query before the API validates its parameters.
      assert.equal((await fetch(`${b}/api/queries?token=s3cret`)).status, 200);
      assert.equal((await fetch(`${b}/healthz`)).status, 200);
      assert.equal((await fetch(`${b}/vendor/vega.min.js`)).status, 200);
      assert.equal((await fetch(`${b}/?token=s3cret`, { method: 'POST' })).status, 405);
    } finally {
      await secured.close();
    }
    assert.equal((await fetch(`${base}/api/flags`, { method: 'DELETE' })).status, 405);
  });
});
