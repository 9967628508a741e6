// Server-rendered shells of the on-call pages. Every value that reaches HTML goes through escapeHtml; the
// pages' scripts are static files (no inline script), so the Content-Security-Policy can forbid the rest.
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { type Request, type Response } from 'express';
import { SELECTOR_FILTERS } from '../../queries/index.ts';
import { escapeHtml } from './escape.ts';
import { markdownToHtml } from './markdown.ts';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = join(here, '..', '..', 'node_modules');
/** Beside the code, not under the working directory: `holdscope serve` may run from anywhere. */
const RUNBOOKS = join(here, '..', '..', 'docs', 'runbooks.md');

export { escapeHtml };

/** No eval (Vega runs its expression interpreter), no inline script, nothing from elsewhere. */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  // Vega and vega-tooltip set element styles from script; vega-embed's stylesheet is served as a file.
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

function securityHeaders(res: Response): void {
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.setHeader('Cache-Control', 'no-store');
}

const VENDOR = ['/vendor/vega.min.js', '/vendor/vega-lite.min.js', '/vendor/vega-embed.min.js'];

/** A page; without a script (the runbooks) it loads none, not even Vega. */
function shell(title: string, body: string, script?: string, stylesheets: readonly string[] = []): string {
  const scripts = script
    ? `${VENDOR.map((src) => `<script src="${escapeHtml(src)}" defer></script>`).join('\n')}
<script type="module" src="${escapeHtml(script)}"></script>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="/static/style.css">
${stylesheets.map((href) => `<link rel="stylesheet" href="${escapeHtml(href)}">`).join('\n')}
${scripts}
</head>
<body>
${body}
</body>
</html>
`;
}

const header = (subtitle: string) => `<header class="top">
<h1><a href="/" id="home-link">holdscope</a> <span class="sub">${escapeHtml(subtitle)}</span></h1>
<form id="controls" class="controls" autocomplete="off">
  <label>range <select name="range" id="range">
    <option value="15m">last 15m</option><option value="1h">last 1h</option><option value="6h">last 6h</option><option value="24h">last 24h</option><option value="custom">custom</option>
  </select></label>
  <label class="custom">from <input type="datetime-local" step="1" name="from" id="from"></label>
  <label class="custom">to <input type="datetime-local" step="1" name="to" id="to"></label>
  <label>cluster <select name="cluster" id="cluster"><option value="">all</option></select></label>
  <label>decode engine <select name="engine" id="engine"><option value="">all</option></select></label>
  <label>refresh <select name="refresh" id="refresh"><option value="0">off</option><option value="30">30 s</option><option value="60">1 min</option><option value="300">5 min</option></select></label>
  <button type="submit">apply</button>
  <span id="status" class="status" role="status"></span>
</form>
</header>`;

/** The selector keys of an arm, as /api/compare and `holdscope compare` name them (queries/compare-selector.ts). */
const ARM_KEYS = [...SELECTOR_FILTERS, 'from', 'to'] as const;
const ARM_HINTS: Partial<Record<(typeof ARM_KEYS)[number], string>> = { from: '-1h or ISO time', to: 'now or ISO time' };

/**
 * The Compare view: a form whose inputs carry /api/compare's keys as their names (both.KEY, baseline.KEY,
 * candidate.KEY, rollout_at, window), filled and submitted by compare.js; the result is rendered there as text.
 */
function compareSection(): string {
  const prefixes = ['both', 'baseline', 'candidate'] as const;
  // Selector values get a datalist of what the page has seen (cmp-list-KEY); times and rollout keys do not.
  const input = (name: string, placeholder = '', list = '') =>
    `<input name="${escapeHtml(name)}" id="cmp-${escapeHtml(name.replace('.', '-'))}" placeholder="${escapeHtml(placeholder)}"${list ? ` list="cmp-list-${escapeHtml(list)}"` : ''} size="16" spellcheck="false">`;
  const rows = ARM_KEYS.map(
    (key) =>
      `<tr><th scope="row">${escapeHtml(key)}</th>${prefixes.map((p) => `<td>${input(`${p}.${key}`, ARM_HINTS[key], ARM_HINTS[key] ? '' : key)}</td>`).join('')}</tr>`,
  ).join('\n');
  const lists = ARM_KEYS.filter((k) => !ARM_HINTS[k])
    .map((k) => `<datalist id="cmp-list-${escapeHtml(k)}"></datalist>`)
    .join('');
  return `<section id="compare" aria-labelledby="compare-title">
  <h2 id="compare-title">Compare two arms</h2>
  <p class="muted hint">Baseline against candidate: each a selector (exact matches) and a window; <b>both</b> is what they share and an arm's own key overrides it. Or a rollout time and a window: the window before it against the window after. Empty means any.</p>
  <form id="compare-form" class="compare-form" autocomplete="off">
    <table class="compare-keys"><thead><tr><th></th>${prefixes.map((p) => `<th scope="col">${escapeHtml(p)}</th>`).join('')}</tr></thead>
    <tbody>
${rows}
    </tbody></table>
    <p class="rollout"><label>rollout_at ${input('rollout_at', 'ISO time or -2h')}</label> <label>window ${input('window', '1h')}</label>
    <button type="submit">compare</button> <button type="reset" id="compare-clear">clear</button> <span id="compare-status" class="muted" role="status"></span></p>
    ${lists}
  </form>
  <div id="compare-arms" class="compare-arms"></div>
  <div id="compare-table" class="table-wrap"></div>
  <figure id="compare-figure" class="chart wide"><figcaption>Differences with their intervals <a id="compare-svg" class="svg-link-compare" href="/charts/compare.svg">SVG</a></figcaption><div class="vis" id="chart-compare"></div></figure>
</section>`;
}

/** The hold-timeout advice of the page's window (advice.js fills it from /api/advice). */
function adviceSection(): string {
  return `<section id="advice" aria-labelledby="advice-title">
  <h2 id="advice-title">Hold-timeout advice <span id="advice-count" class="count"></span></h2>
  <p class="muted hint">Per pairing and decode engine: the smallest hold timeout at which a write lands after release with probability below the target, its 95% interval, today's timeout, what each costs per abort in KV slot-seconds, and the share of the engine's KV it would have pinned in the window's worst abort storm.</p>
  <div id="advice-table" class="table-wrap"><p class="muted">loading…</p></div>
</section>`;
}

export function oncallPage(): string {
  return shell(
    'holdscope · on-call',
    `${header('on-call: KV-page holds')}
<main>
<section id="incidents-section" aria-labelledby="incidents-title">
  <h2 id="incidents-title">Incidents <span id="incident-count" class="count"></span></h2>
  <p class="muted hint">Safety violations grouped by cluster, kind and culprit (engines, versions, backend); each is one alert.</p>
  <div id="incidents" class="incidents"><p class="muted">loading…</p></div>
</section>
<section id="flags-section" aria-labelledby="flags-title">
  <h2 id="flags-title">Flags <span id="flag-count" class="count"></span></h2>
  <p class="muted hint">Every flag, most severe first: those about an engine or a pairing listed, those about one request under their kind (open it).</p>
  <div id="flags" class="flags"><p class="muted">loading…</p></div>
</section>
<section class="charts">
  <figure id="resolution" class="chart"><figcaption>(a) Hold resolution per decode engine <a class="svg-link" data-chart="resolution" href="/charts/resolution.svg">SVG</a></figcaption><div class="vis" id="chart-resolution"></div></figure>
  <figure id="tails" class="chart"><figcaption>(b) Transfer tails per prefill engine <a class="svg-link" data-chart="tails" href="/charts/tails.svg">SVG</a></figcaption><div class="vis" id="chart-tails"></div></figure>
  <figure id="kv_pinned" class="chart"><figcaption>(c) KV slots pinned by holds <a class="svg-link" data-chart="kv_pinned" href="/charts/kv_pinned.svg">SVG</a></figcaption><div class="vis" id="chart-kv_pinned"></div></figure>
  <figure id="pairing" class="chart"><figcaption>(d) Deployment pairing review (prefill version × decode version × backend)</figcaption><div id="pairing-table" class="table-wrap"></div></figure>
</section>
${compareSection()}
${adviceSection()}
</main>`,
    '/static/oncall.js',
    ['/static/compare.css'],
  );
}

export function requestPage(requestId: string): string {
  return shell(
    `holdscope · request ${requestId}`,
    `${header('request drilldown')}
<main>
<section>
  <h2>Request <code id="request-id">${escapeHtml(requestId)}</code></h2>
  <div id="lifecycles" class="table-wrap"><p class="muted">loading…</p></div>
</section>
<section class="charts">
  <figure id="timeline" class="chart wide"><figcaption>Timeline across engines and generations <a id="timeline-svg" href="/charts/timeline.svg?request_id=${escapeHtml(encodeURIComponent(requestId))}">SVG</a></figcaption><div class="vis" id="chart-timeline"></div></figure>
</section>
<section>
  <h2>Late writes and their victims</h2>
  <div id="victims"><p class="muted">loading…</p></div>
</section>
</main>`,
    '/static/request.js',
  );
}

/** docs/runbooks.md as a page, each heading at its GitHub anchor: an alert's runbook_url is `/runbooks#alertname`. */
export function runbooksPage(markdown: string): string {
  return shell(
    'holdscope · runbooks',
    `<header class="top"><h1><a href="/">holdscope</a> <span class="sub">runbooks</span></h1></header>
<main class="doc">
${markdownToHtml(markdown)}
</main>`,
  );
}

/**
 * Paths that hold no data (scripts, stylesheet, Vega builds, the runbooks): served without the token, so the login-less
 * shell loads and an alert's runbook_url opens from the pager as it is.
 */
export const isPageAsset = (path: string) =>
  path.startsWith('/vendor/') || path.startsWith('/static/') || path === '/favicon.ico' || path === '/runbooks';

/** The pages, their static script and stylesheet, and the Vega browser builds from node_modules (no CDN). */
export function createPageRoutes(): express.Router {
  const router = express.Router();
  // A Map, not an object literal: `constructor` or `__proto__` must be unknown names (404), not the prototype's.
  const vendor = new Map([
    ['vega.min.js', join(nodeModules, 'vega', 'build', 'vega.min.js')],
    ['vega-lite.min.js', join(nodeModules, 'vega-lite', 'build', 'vega-lite.min.js')],
    ['vega-embed.min.js', join(nodeModules, 'vega-embed', 'build', 'vega-embed.min.js')],
  ]);
  router.get('/vendor/:file', (req: Request, res: Response, next) => {
    const path = vendor.get(String(req.params.file));
    if (!path) return next();
    res.sendFile(path, { maxAge: '1h' });
  });
  // fallthrough: an unknown name reaches the 404 rather than express.static's own error page.
  router.use('/static', express.static(join(here, 'static'), { index: false, maxAge: 0, fallthrough: true }));
  router.get('/favicon.ico', (_req, res) => {
    res.status(204).end();
  });
  router.get('/', (_req, res) => {
    securityHeaders(res);
    res.type('html').send(oncallPage());
  });
  // Read at each request: the document is small, and an edit shows without a restart.
  router.get('/runbooks', async (_req, res) => {
    const markdown = await readFile(RUNBOOKS, 'utf8');
    securityHeaders(res);
    res.type('html').send(runbooksPage(markdown));
  });
  router.get('/requests/:id', (req, res) => {
    securityHeaders(res);
    res.type('html').send(requestPage(String(req.params.id)));
  });
  return router;
}
