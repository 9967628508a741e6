import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { createPdEmitter } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue } from '../../pipeline/index.ts';
import type { Flag } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';

const EVIL_ID = '<script>alert(1)</script>';
const EVIL_VICTIM = '"><img src=x onerror=alert(2)>';
const CHROMIUM = '/usr/bin/chromium';

/** A request whose id is markup, through the real emitter and collector: its late write lands on a victim's pages. */
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

describe('the on-call page in a real browser (Chromium)', { timeout: 90_000 }, () => {
  let client: ClickHouseClient;
  let server: { port: number; close(): Promise<void> };
  let browser: Browser;
  let base = '';
  const problems: string[] = [];
  const dialogs: string[] = [];

  before(async () => {
    client = await createClickHouse({ dataPath: mkdtempSync(join(tmpdir(), 'holdscope-chdb-')) });
    const database = randomDatabase('page');
    await loadScenario(client, database, 'mixed', 31, (c) => void (c.requests = 300), Date.now() - 8 * 60_000);
    await loadEvilRequest(client, database, Date.now() - 3 * 60_000);
    server = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    base = `http://127.0.0.1:${server.port}`;
    // playwright-core gives the browser a fresh temporary profile (its own --user-data-dir) and removes it on close.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
    await client?.close();
  });

  async function open(path: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`HTTP ${r.status()} ${r.url()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await page.goto(base + path);
    await page.waitForSelector('body[data-loaded="true"]', { timeout: 30_000 });
    return page;
  }

  const marks = (page: Page, id: string) => page.locator(`#${id} svg .role-mark > *`).count();

  it('shows the flags (as /api/flags has them), four views with marks, no console errors; links to a drilldown', async () => {
    const page = await open('/?range=1h&refresh=0');
    assert.deepEqual(problems, []);
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('range'), '1h');

    // Flags: the same set as the API, over the page's own window.
    const status = await page.locator('#status').textContent();
    assert.match(status ?? '', /updated/);
    const shown = await page.locator('#flags li.flag').count();
    const window = await page.evaluate(() => {
      const to = Date.now();
      return { from: new Date(to - 3_600_000).toISOString(), to: new Date(to).toISOString() };
    });
    const api = (await (await fetch(`${base}/api/flags?from=${window.from}&to=${window.to}`)).json()) as { flags: Flag[] };
    assert.ok(api.flags.length > 0);
    assert.equal(shown, api.flags.length);
    const kinds = await page.locator('#flags .flag-group').evaluateAll((els) => els.map((e) => e.getAttribute('data-kind')));
    assert.deepEqual(new Set(kinds), new Set(api.flags.map((f) => f.kind)));
    const firstSeverity = await page.locator('#flags .flag-group .badge').first().textContent();
    assert.equal(firstSeverity, 'critical');

    for (const id of ['chart-resolution', 'chart-tails', 'chart-kv_pinned']) assert.ok((await marks(page, id)) > 0, `${id} renders marks`);
    assert.ok((await page.locator('#pairing-table tbody tr').count()) > 0, 'pairing review rows');

    // The first late-write flag's evidence link opens its drilldown.
    const link = page.locator('#flags li.flag[data-kind="late_write"] a.evidence').first();
    const href = await link.getAttribute('href');
    assert.match(href ?? '', /^\/requests\//);
    await link.click();
    await page.waitForURL(/\/requests\//);
    await page.waitForSelector('body[data-loaded="true"]', { timeout: 30_000 });
    assert.ok((await marks(page, 'chart-timeline')) > 0, 'timeline renders marks');
    assert.ok((await page.locator('#lifecycles tbody tr').count()) > 0);
    assert.deepEqual(problems, []);

    if (process.env.HOLDSCOPE_SCREENSHOT === '1') {
      const shot = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
      await shot.goto(`${base}/?range=15m&refresh=0`);
      await shot.waitForSelector('body[data-loaded="true"]', { timeout: 30_000 });
      await shot.screenshot({ path: new URL('../../docs/oncall-page.png', import.meta.url).pathname, fullPage: true });
    }
  });

  it('shows a request id carrying <script> as text, and its victim with markup as a link text', async () => {
    const page = await open(`/requests/${encodeURIComponent(EVIL_ID)}`);
    assert.equal(await page.locator('#request-id').textContent(), EVIL_ID);
    assert.ok(await page.locator('#request-id').isVisible());
    assert.equal(await page.title(), `holdscope · request ${EVIL_ID}`);
    const victim = page.locator('#victims li.victim a').first();
    assert.equal(await victim.textContent(), EVIL_VICTIM);
    assert.equal(await page.locator('img[src="x"]').count(), 0);
    assert.ok((await marks(page, 'chart-timeline')) > 0);
    const svgText = await page.locator('#chart-timeline svg').textContent();
    assert.ok(svgText?.includes(`Request ${EVIL_ID}`));
    // The flags list of the on-call page carries the same id, as text.
    const home = await open('/?range=1h&refresh=0');
    const evil = home.locator('#flags li.flag', { hasText: EVIL_ID }).first();
    assert.ok((await evil.count()) > 0);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(dialogs, []);
    assert.deepEqual(problems, []);
  });
});
