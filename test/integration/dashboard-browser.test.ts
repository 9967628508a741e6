import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import type { Flag } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { EVIL_ID, EVIL_VICTIM, loadEvilRequest } from '../support/markup-request.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';

const CHROMIUM = '/usr/bin/chromium';

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
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
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
