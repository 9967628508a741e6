import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { escapeHtml } from '../../dashboards/pages/html.ts';
import { loadScenario } from '../support/load.ts';
import { EVIL_ID, loadEvilRequest } from '../support/markup-request.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

describe('GET /charts/:name.svg renders the page specs on the server', () => {
  let client: ClickHouseClient;
  let server: { port: number; close(): Promise<void> };
  let base = '';
  before(async () => {
    client = await embeddedClickHouse();
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
  const markPaths = (body: string, role: string) =>
    (body.match(new RegExp(`class="mark-${role} role-mark[^"]*"[^>]*>\\s*<path`, 'g')) ?? []).length;

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
