/* global document, location, URLSearchParams, fetch, Node */
// Shared by the on-call pages. Untrusted values only ever reach the DOM as textContent or attributes set
// through the DOM API (never innerHTML), and links are built with encodeURIComponent.

export const RANGES = { '15m': 15 * 60_000, '1h': 3_600_000, '6h': 6 * 3_600_000, '24h': 24 * 3_600_000 };

/** The view's state, all of it in the URL query string so a pasted link reproduces the view. */
export function readState() {
  const q = new URLSearchParams(location.search);
  // A link that names its window (an alert's: ?from=&to=&cluster=) is a custom range without saying so.
  const named = q.get('range') ?? (q.get('from') && q.get('to') ? 'custom' : '');
  const range = Object.hasOwn(RANGES, named) || named === 'custom' ? named : '1h';
  const refresh = Number(q.get('refresh') ?? '30');
  return {
    range,
    from: q.get('from') ?? '',
    to: q.get('to') ?? '',
    cluster: q.get('cluster') ?? '',
    engine: q.get('engine') ?? '',
    refresh: Number.isFinite(refresh) && refresh >= 0 ? refresh : 30,
    token: q.get('token') ?? '',
  };
}

/** The absolute [from, to] of the state: a relative range ends now. */
export function windowOf(state) {
  if (state.range === 'custom' && Number.isFinite(Date.parse(state.from)) && Number.isFinite(Date.parse(state.to))) {
    return { from: new Date(state.from).toISOString(), to: new Date(state.to).toISOString() };
  }
  const to = Date.now();
  return { from: new Date(to - (RANGES[state.range] ?? RANGES['1h'])).toISOString(), to: new Date(to).toISOString() };
}

/** The SVG namespace: a sparkline is built with the DOM API, as every other element, never from markup. */
const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with its attributes; children are elements or text (as text nodes). */
export function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  for (const c of children.flat())
    if (c !== undefined && c !== null) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

/** "2026-12-01 10:02:03" of an ISO time (UTC, as the page's window). */
export const shortTime = (iso) =>
  String(iso ?? '')
    .slice(0, 19)
    .replace('T', ' ');

export function stateQuery(state) {
  const q = new URLSearchParams();
  q.set('range', state.range);
  if (state.range === 'custom') {
    if (state.from) q.set('from', state.from);
    if (state.to) q.set('to', state.to);
  }
  if (state.cluster) q.set('cluster', state.cluster);
  if (state.engine) q.set('engine', state.engine);
  q.set('refresh', String(state.refresh));
  if (state.token) q.set('token', state.token);
  return q;
}

/** A same-origin URL with query parameters (and the token when the page was opened with one). */
export function url(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const token = new URLSearchParams(location.search).get('token');
  if (token) q.set('token', token);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export async function getJson(path, params) {
  const res = await fetch(url(path, params), { headers: { accept: 'application/json' } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${path}: ${res.status} ${body.error ?? ''}`);
  return body;
}

/** el('a', { href, class }, 'text', child...): attributes via setAttribute, text via text nodes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null && v !== false) node.setAttribute(k, String(v));
  for (const c of children.flat())
    if (c !== undefined && c !== null) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

export const requestHref = (requestId, cluster) => url(`/requests/${encodeURIComponent(requestId)}`, { cluster });

/** Embeds a Vega-Lite spec with Vega's expression interpreter: no eval, so the CSP needs no 'unsafe-eval'. */
export async function embed(container, spec) {
  container.replaceChildren();
  const vegaEmbed = globalThis.vegaEmbed;
  const result = await vegaEmbed(container, spec, { ast: true, renderer: 'svg', actions: false, defaultStyle: false });
  container.dataset.rendered = 'true';
  return result;
}

export function setStatus(text, isError = false) {
  const s = document.getElementById('status');
  if (!s) return;
  s.textContent = text;
  s.classList.toggle('error', isError);
}

/** Fills the header controls from the state and navigates (keeping everything in the URL) on submit. */
export function bindControls(state, onChange) {
  const form = document.getElementById('controls');
  const range = document.getElementById('range');
  const from = document.getElementById('from');
  const to = document.getElementById('to');
  const refresh = document.getElementById('refresh');
  range.value = state.range;
  const w = windowOf(state);
  from.value = w.from.slice(0, 19);
  to.value = w.to.slice(0, 19);
  if (![...refresh.options].some((o) => o.value === String(state.refresh)))
    refresh.append(el('option', { value: String(state.refresh) }, `${state.refresh} s`));
  refresh.value = String(state.refresh);
  for (const [id, value] of [
    ['cluster', state.cluster],
    ['engine', state.engine],
  ]) {
    const select = document.getElementById(id);
    if (value && ![...select.options].some((o) => o.value === value)) select.append(el('option', { value }, value));
    select.value = value;
  }
  form.classList.toggle('is-custom', state.range === 'custom');
  range.addEventListener('change', () => form.classList.toggle('is-custom', range.value === 'custom'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = {
      ...state,
      range: range.value,
      from: range.value === 'custom' ? `${from.value}Z` : '',
      to: range.value === 'custom' ? `${to.value}Z` : '',
      cluster: document.getElementById('cluster').value,
      engine: document.getElementById('engine').value,
      refresh: Number(refresh.value),
    };
    onChange(next);
  });
  const home = document.getElementById('home-link');
  if (home) home.setAttribute('href', `/?${stateQuery({ ...state, engine: state.engine })}`);
}

/** Adds options (values from data) to a select, keeping its current value. */
export function fillSelect(id, values) {
  const select = document.getElementById(id);
  const current = select.value;
  const have = new Set([...select.options].map((o) => o.value));
  for (const v of [...new Set(values)].filter(Boolean).sort()) if (!have.has(v)) select.append(el('option', { value: v }, v));
  select.value = current;
}

export function compactRanges(numbers) {
  const xs = [...new Set(numbers)].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < xs.length; i++) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
    out.push(i === j ? String(xs[i]) : `${xs[i]}..${xs[j]}`);
    i = j;
  }
  return out.join(', ');
}

export function table(columns, rows, rowClass = () => '') {
  return el(
    'table',
    {},
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        columns.map((c) => el('th', {}, c.title)),
      ),
    ),
    el(
      'tbody',
      {},
      rows.map((r) =>
        el(
          'tr',
          { class: rowClass(r) || undefined },
          columns.map((c) => el('td', { class: c.num ? 'num' : undefined }, c.value(r))),
        ),
      ),
    ),
  );
}
