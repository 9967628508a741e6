import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import type { ComparisonReport, Flag, Incident } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { EVIL_ID, EVIL_VICTIM, loadEvilRequest, loadLateWrite } from '../support/markup-request.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const CHROMIUM = '/usr/bin/chromium';

/** Engine names and a version carrying markup: an incident's culprit is span text too. */
const EVIL_DECODE = '<img src=x onerror=alert(3)>';
const EVIL_PREFILL = '"><svg onload=alert(4)>';
const EVIL_VERSION = '</b><script>alert(5)</script>';
const EVIL_ENGINES_REQUEST = 'late-on-markup-engines';

describe('the on-call page in a real browser (Chromium)', { timeout: 90_000 }, () => {
  let client: ClickHouseClient;
  let server: { port: number; close(): Promise<void> };
  let browser: Browser;
  let base = '';
  const problems: string[] = [];
  const dialogs: string[] = [];

  before(async () => {
    client = await embeddedClickHouse();
    const database = randomDatabase('page');
    await loadScenario(client, database, 'mixed', 31, (c) => void (c.requests = 300), Date.now() - 8 * 60_000);
    await loadEvilRequest(client, database, Date.now() - 3 * 60_000);
    // A late write between engines whose ids and version are markup.
    await loadLateWrite(client, database, Date.now() - 2 * 60_000, {
      requestId: EVIL_ENGINES_REQUEST,
      decodeEngine: EVIL_DECODE,
      prefillEngine: EVIL_PREFILL,
      version: EVIL_VERSION,
    });
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

    // Per-request kinds are closed below the incidents; the first late-write flag's evidence link opens its drilldown.
    assert.equal(await page.locator('#flags li.flag[data-kind="late_write"]').first().isVisible(), false);
    await page.locator('#flags details.flag-group[data-kind="late_write"] > summary').click();
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
  it('lists incidents first, one row per culprit (engines, versions, count, sparkline, examples), as /api/incidents has them', async () => {
    const page = await open('/?range=1h&refresh=0');
    const window = await page.evaluate(() => {
      const to = Date.now();
      return { from: new Date(to - 3_600_000).toISOString(), to: new Date(to).toISOString() };
    });
    const api = (await (await fetch(`${base}/api/incidents?from=${window.from}&to=${window.to}`)).json()) as { incidents: Incident[] };
    assert.ok(api.incidents.length >= 3, `${api.incidents.length} incidents`);
    // Above the flags, in the order of the page and on the screen.
    const top = (selector: string) => page.locator(selector).evaluate((e) => e.getBoundingClientRect().top);
    assert.ok((await top('#incidents-section')) < (await top('#flags-section')));
    const rows = page.locator('#incidents li.incident');
    assert.deepEqual(
      await rows.evaluateAll((els) => els.map((e) => e.id)),
      api.incidents.map((i) => `incident-${i.id}`),
    );
    for (const incident of api.incidents.slice(0, 6)) {
      const row = page.locator(`[id="incident-${incident.id}"]`);
      const text = (await row.textContent()) ?? '';
      const { decode_engine, decode_version, prefill_engine, backend } = incident.culprit;
      for (const part of [incident.kind, `× ${incident.violations}`, decode_engine, decode_version, prefill_engine, backend])
        assert.ok(text.includes(part), `${incident.id} shows ${part}: ${text}`);
      // Every violation in one bar or another (the page's window ends a moment later than this one: its buckets may differ).
      const bars = (await row.locator('svg.sparkline rect title').allTextContents()).map(Number);
      assert.ok(bars.length > 0 && bars.every((n) => n > 0), `bars of ${incident.id}`);
      assert.equal(
        bars.reduce((a, b) => a + b, 0),
        incident.violations,
        `sparkline of ${incident.id}`,
      );
      assert.deepEqual(
        await row.locator('a.example').evaluateAll((els) => els.map((e) => [e.textContent, e.getAttribute('href')])),
        incident.examples.map((e) => [e.request_id, `/requests/${encodeURIComponent(e.request_id)}?cluster=${incident.cluster}`]),
      );
    }
    // A flag links to its incident.
    await page.locator('#flags details.flag-group[data-kind="late_write"] > summary').click();
    const flagLink = page.locator('#flags li.flag[data-kind="late_write"] a.incident-link').first();
    const target = (await flagLink.getAttribute('href')) ?? '';
    assert.match(target, /^#incident-[0-9a-f]{16}$/);
    await flagLink.click();
    assert.equal(await page.locator(`[id="${target.slice(1)}"]`).getAttribute('class'), 'incident sev-critical highlight');
    assert.deepEqual(problems, []);
  });

  it("opens an alert's link on the incident: its window from the URL, the row in view and highlighted", async () => {
    const from = new Date(Date.now() - 20 * 60_000).toISOString();
    const to = new Date(Date.now() + 60_000).toISOString();
    const api = (await (await fetch(`${base}/api/incidents?from=${from}&to=${to}`)).json()) as { incidents: Incident[] };
    // The last row: far below the first screen, so landing on it is the page's doing.
    const incident = api.incidents.at(-1) as Incident;
    const page = await open(`/?from=${from}&to=${to}&cluster=${encodeURIComponent(incident.cluster)}#incident-${incident.id}`);
    assert.equal(await page.locator('#range').inputValue(), 'custom');
    const row = page.locator(`[id="incident-${incident.id}"]`);
    assert.match((await row.getAttribute('class')) ?? '', /\bhighlight\b/);
    assert.equal(await page.locator('.incident.highlight').count(), 1);
    // The browser's globals, untyped here (the tests compile without the DOM library).
    type View = { innerHeight: number; scrollY: number; location: { hash: string } };
    const rowTop = await row.evaluate((e) => e.getBoundingClientRect().top);
    const headerBottom = await page.locator('header.top').evaluate((e) => e.getBoundingClientRect().bottom);
    const view = await page.evaluate(() => {
      const g = globalThis as unknown as View;
      return { height: g.innerHeight, scrollY: g.scrollY };
    });
    assert.ok(
      rowTop >= headerBottom - 1 && rowTop < view.height,
      `row at ${rowTop} of ${view.height}, below the header at ${headerBottom}`,
    );
    assert.ok(view.scrollY > 0, 'the page scrolled to it');
    // An incident not in this view (another range or cluster): the page says so rather than showing nothing.
    await page.evaluate(() => void ((globalThis as unknown as View).location.hash = '#incident-0000000000000000'));
    await page.waitForSelector('#incident-missing');
    assert.equal(await page.locator('.incident.highlight').count(), 0);
    assert.deepEqual(problems, []);
  });

  it('renders the Compare view from its URL (table, chart, SVG link) and the advice, engine names with markup as text', async () => {
    const params = new URLSearchParams({ 'both.from': '-1h', 'baseline.decode_engine': EVIL_DECODE });
    const page = await open(`/?range=1h&refresh=0&${params}`);
    await page.waitForSelector('#compare[data-rendered="true"]', { timeout: 30_000 });
    assert.equal(await page.locator('#compare-status').getAttribute('class'), 'muted');
    assert.equal(await page.locator('[name="baseline.decode_engine"]').inputValue(), EVIL_DECODE);
    const api = (await (await fetch(`${base}/api/compare?${params}`)).json()) as ComparisonReport;
    // One row per metric, in the API's order; the arm's selector, with the name carrying markup, as text.
    assert.deepEqual(
      await page.locator('#compare-table tbody tr').evaluateAll((els) => els.map((e) => e.getAttribute('data-metric'))),
      api.metrics.map((m) => m.metric),
    );
    assert.ok(((await page.locator('#compare-arms .arm-baseline .selector').textContent()) ?? '').includes(`decode_engine=${EVIL_DECODE}`));
    assert.ok((await marks(page, 'chart-compare')) > 0, 'the chart of the differences renders marks');
    assert.ok(((await page.locator('#chart-compare svg').textContent()) ?? '').includes(`baseline: decode_engine=${EVIL_DECODE}`));
    assert.equal(await page.locator('#compare-svg').getAttribute('href'), `/charts/compare.svg?${params}`);
    // The advice of the page's window: one row per pairing and decode engine, the engine carrying markup among them.
    const adviceRows = page.locator('#advice-table tbody tr');
    assert.ok((await adviceRows.count()) > 0);
    assert.ok((await page.locator('#advice-table tbody tr', { hasText: EVIL_DECODE }).count()) > 0);
    // A new comparison from the form: its keys go to the URL (a pasted link reproduces it), the header's stay.
    await page.locator('[name="candidate.from"]').fill('-30m');
    await page.locator('#compare-form button[type="submit"]').click();
    await page.waitForFunction(() => {
      const g = globalThis as unknown as { document: { getElementById(id: string): { dataset: Record<string, string> } } };
      return g.document.getElementById('compare').dataset.rendered === 'true';
    });
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('candidate.from'), '-30m');
    assert.equal(url.searchParams.get('range'), '1h');
    assert.match((await page.locator('#compare-arms .arm-candidate').textContent()) ?? '', /\(30 minutes\)/);
    // A bad window is the API's 400, said in the view.
    await page.locator('[name="candidate.from"]').fill('not-a-time');
    await page.locator('#compare-form button[type="submit"]').click();
    await page.waitForSelector('#compare-status.error');
    assert.match((await page.locator('#compare-status').textContent()) ?? '', /candidate\.from/);
    problems.splice(
      0,
      problems.length,
      ...problems.filter((p) => !/HTTP 400 .*\/charts\/compare\.json/.test(p) && !/status of 400/.test(p)),
    );
    assert.equal(await page.locator('img[src="x"]').count(), 0);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(dialogs, []);
    assert.deepEqual(problems, []);
  });

  it('shows engine names, versions and request ids carrying markup as text in the incident rows', async () => {
    const page = await open('/?range=1h&refresh=0');
    // Its late write, and its release by timeout with that write in flight: two incidents of the same culprit.
    const rows = page.locator('#incidents li.incident', { hasText: EVIL_DECODE });
    assert.deepEqual(
      new Set(await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-kind')))),
      new Set(['late_write', 'unsafe_release']),
    );
    for (const row of await rows.all()) {
      const text = (await row.textContent()) ?? '';
      for (const evil of [EVIL_DECODE, EVIL_PREFILL, EVIL_VERSION, EVIL_ENGINES_REQUEST])
        assert.ok(text.includes(evil), `${evil} in ${text}`);
      // Each name is one text node of its own element, not markup.
      assert.deepEqual(await row.locator('.culprit b').allTextContents(), [EVIL_DECODE, EVIL_PREFILL, 'mooncake', 'default']);
    }
    // The request whose id is markup heads its own incident's examples, as a link's text.
    const evilExample = page.locator('#incidents a.example', { hasText: EVIL_ID });
    assert.equal(await evilExample.first().textContent(), EVIL_ID);
    assert.equal(await page.locator('img[src="x"], #incidents script, #incidents svg:not(.sparkline)').count(), 0);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(dialogs, []);
    assert.deepEqual(problems, []);
  });
});
