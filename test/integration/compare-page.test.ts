// The page's Compare view and advice against real components: simulated traffic through the collector and writer into
// embedded ClickHouse, served by the real HTTP server. The Compare chart as SVG and as a spec carrying its comparison,
// the 400 naming a bad key, an engine name carrying markup escaped wherever it reaches, and the page's shell.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { CONTENT_SECURITY_POLICY } from '../../dashboards/pages/html.ts';
import type { SimConfig } from '../../emitter/index.ts';
import type { AdviceReport, ComparisonReport } from '../../queries/index.ts';
import { abortHeavyArm } from '../support/arm-config.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const EVIL_ENGINE = '<img src=x onerror=alert(1)>';
const ESCAPED = '&lt;img src=x onerror=alert(1)&gt;';

/** Two decode engines, one named with markup, v1 and v2; v2's engines lose 10 % of acks. */
const arm =
  (version: string, engine: string, ackLoss: number) =>
  (c: SimConfig): void => {
    abortHeavyArm(c, { requests: 400, ackLoss, holdTimeoutMs: 2000 });
    c.decode = c.decode.slice(0, 1).map((d) => ({ ...d, id: engine, version }));
  };

describe('the Compare view and advice on the page (chdb embedded)', { timeout: 120_000 }, () => {
  let client: ClickHouseClient;
  let server: { port: number; close(): Promise<void> };
  let base = '';
  const at = Date.now() - 20 * 60_000;
  const pairs = {
    'both.from': new Date(at - 60_000).toISOString(),
    'both.to': new Date(at + 600_000).toISOString(),
    'baseline.decode_engine': EVIL_ENGINE,
    'candidate.decode_engine': 'decode-v2',
  };
  const query = (p: Record<string, string>) => new URLSearchParams(p).toString();

  before(async () => {
    client = await embeddedClickHouse();
    const database = randomDatabase('cmppage');
    await loadScenario(client, database, 'steady', 301, arm('v1', EVIL_ENGINE, 0), at);
    await loadScenario(client, database, 'steady', 302, arm('v2', 'decode-v2', 0.1), at);
    server = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    base = `http://127.0.0.1:${server.port}`;
  });
  after(async () => {
    await server?.close();
    await client?.close();
  });

  it('answers SVG for a valid comparison: one row per judged metric, the markup engine name as escaped text', async () => {
    const res = await fetch(`${base}/charts/compare.svg?${query(pairs)}`);
    const body = await res.text();
    assert.equal(res.status, 200, body.slice(0, 300));
    assert.match(res.headers.get('content-type') ?? '', /^image\/svg\+xml/);
    assert.ok(body.startsWith('<svg') && body.trimEnd().endsWith('</svg>'));
    assert.ok(!body.includes('<img'), 'no raw <img in the SVG');
    assert.ok(body.includes(`baseline: decode_engine=${ESCAPED}`), 'the baseline selector shows as escaped text');
    assert.match(body, /candidate: decode_engine=decode-v2/);
    // Every judged metric is a row, labelled with its unit; the timeout share is worse (v2 loses acks).
    for (const label of [
      'timeout share (of resolved holds) (pp)',
      'transfer tail p99 (ms)',
      'late writes per 10,000 holds (per 10k holds)',
    ])
      assert.ok(body.includes(label), label);
    assert.match(body, /fill="#c9302c"/, 'a "worse" row');
  });

  it('answers the spec with the comparison it draws, the same numbers /api/compare gives', async () => {
    const spec = (await (await fetch(`${base}/charts/compare.json?${query(pairs)}`)).json()) as {
      usermeta: { comparison: ComparisonReport };
      vconcat: unknown[];
    };
    const report = spec.usermeta.comparison;
    const share = report.metrics.find((m) => m.metric === 'timeout_share');
    assert.equal(share?.verdict, 'worse');
    assert.equal(spec.vconcat.length, report.metrics.filter((m) => m.direction !== null).length);
    assert.ok(report.baseline.summary.holds > 50 && report.candidate.summary.holds > 50);
    const api = (await (await fetch(`${base}/api/compare?${query(pairs)}`)).json()) as ComparisonReport;
    for (const name of ['holds', 'timeout_share', 'late_writes_per_10k_holds'])
      assert.deepEqual(
        report.metrics.find((m) => m.metric === name),
        api.metrics.find((m) => m.metric === name),
        name,
      );
  });

  it('refuses a bad request with a 400 naming the key, as /api/compare does', async () => {
    for (const [params, named] of [
      [{ ...pairs, 'baseline.decode_verison': 'v1' }, /unknown parameter "baseline\.decode_verison"/],
      [{ 'baseline.from': 'yesterday-ish' }, /baseline\.from/],
      [{ window: '1h' }, /window: only with rollout_at/],
      [{ rollout_at: 'not a time' }, /rollout_at/],
    ] as const) {
      for (const ext of ['svg', 'json']) {
        const res = await fetch(`${base}/charts/compare.${ext}?${query(params)}`);
        const body = (await res.json()) as { error: string };
        assert.equal(res.status, 400, `${ext} ${JSON.stringify(params)}`);
        assert.match(body.error, named);
      }
    }
    // A repeated key is refused, not guessed at.
    assert.equal((await fetch(`${base}/charts/compare.svg?window=1h&window=2h`)).status, 400);
    // The other charts still answer, and unknown ones are still 404.
    assert.equal((await fetch(`${base}/charts/tails.json`)).status, 200);
    assert.equal((await fetch(`${base}/charts/compared.svg`)).status, 404);
  });

  it('the on-call page carries the Compare form and the advice section, static scripts only, under the CSP', async () => {
    const res = await fetch(`${base}/`);
    const html = await res.text();
    assert.equal(res.headers.get('content-security-policy'), CONTENT_SECURITY_POLICY);
    for (const name of ['both.decode_version', 'baseline.from', 'candidate.backend', 'rollout_at', 'window'])
      assert.ok(html.includes(`name="${name}"`), name);
    assert.ok(html.includes('id="advice-table"'));
    assert.ok(!/<script>/.test(html) && !/<script(?![^>]*\bsrc=)/.test(html), 'every script is a file');
    for (const asset of ['/static/compare.js', '/static/advice.js', '/static/compare.css']) {
      const a = await fetch(base + asset);
      assert.equal(a.status, 200, asset);
    }
  });

  it('/api/advice, which the section reads, returns the engine named with markup as data for the page to show as text', async () => {
    const report = (await (await fetch(`${base}/api/advice?from=-1h`)).json()) as AdviceReport;
    assert.ok(report.groups.some((g) => g.decode_engine === EVIL_ENGINE));
    for (const g of report.groups) assert.ok(g.advice.method === 'too-few' || g.advice.timeoutMs > 0);
  });
});
