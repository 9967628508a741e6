/* global document, location */
import {
  bindControls,
  el,
  embed,
  fillSelect,
  getJson,
  readState,
  requestHref,
  setStatus,
  stateQuery,
  table,
  url,
  windowOf,
} from './common.js';

const state = readState();
const SEVERITY = { critical: 0, warning: 1, info: 2 };
/** Where a distribution flag's evidence is: its chart on this page and the named query behind it. */
const EVIDENCE = {
  timeout_heavy: { anchor: '#resolution', query: 'hold_resolution_groups', label: 'resolution chart' },
  pairing_incompatible: { anchor: '#pairing', query: 'hold_resolution_groups', label: 'pairing review' },
  long_transfer_tail: { anchor: '#tails', query: 'transfer_tails', label: 'tails chart' },
  kv_capacity_exhaustion: { anchor: '#kv_pinned', query: 'kv_pinned', label: 'KV chart' },
};
const PER_KIND_VISIBLE = 5;

function scopeText(flag) {
  if (flag.request_id !== undefined) return `cluster ${flag.cluster} · request ${flag.request_id} · generation ${flag.generation}`;
  const scope = Object.entries(flag.scope ?? {})
    .filter(([k, v]) => v && k !== 'cluster')
    .map(([k, v]) => `${k} ${v}`);
  const numbers = [];
  if (flag.value !== undefined) numbers.push(`value ${flag.value}`);
  if (flag.threshold !== undefined) numbers.push(`threshold ${flag.threshold}`);
  if (flag.sample_size !== undefined) numbers.push(`n=${flag.sample_size}`);
  return [`cluster ${flag.cluster}`, ...scope, ...numbers].join(' · ');
}

function flagItem(flag, window) {
  const links = [];
  if (flag.request_id !== undefined) {
    links.push(el('a', { class: 'evidence', href: requestHref(flag.request_id, flag.cluster) }, 'timeline →'));
  } else {
    const ev = EVIDENCE[flag.kind];
    if (ev) {
      links.push(el('a', { class: 'evidence', href: ev.anchor }, `${ev.label} →`));
      links.push(
        el(
          'a',
          { class: 'evidence query', href: url(`/api/queries/${ev.query}`, { from: window.from, to: window.to, cluster: flag.cluster }) },
          'query',
        ),
      );
    }
  }
  return el(
    'li',
    { class: `flag sev-${flag.severity}`, 'data-kind': flag.kind },
    el('span', { class: `badge sev-${flag.severity}` }, flag.severity),
    el(
      'div',
      { class: 'flag-body' },
      el('p', { class: 'summary' }, flag.summary),
      el('p', { class: 'scope' }, scopeText(flag), ' ', ...links),
    ),
  );
}

function renderFlags(flags, totals, window) {
  const box = document.getElementById('flags');
  const visible = state.engine ? flags.filter((f) => !f.scope?.decode_engine || f.scope.decode_engine === state.engine) : flags;
  visible.sort((a, b) => (SEVERITY[a.severity] ?? 9) - (SEVERITY[b.severity] ?? 9));
  // Lifecycle flags come capped per kind (the most recent); totals count them all.
  const totalOf = new Map();
  for (const t of totals ?? []) totalOf.set(t.kind, (totalOf.get(t.kind) ?? 0) + t.count);
  const listedOf = new Map();
  for (const f of visible) listedOf.set(f.kind, (listedOf.get(f.kind) ?? 0) + 1);
  const countOf = (kind) => (state.engine ? listedOf.get(kind) : Math.max(totalOf.get(kind) ?? 0, listedOf.get(kind) ?? 0)) ?? 0;
  const overall = [...listedOf.keys()].reduce((n, kind) => n + countOf(kind), 0);
  document.getElementById('flag-count').textContent = `(${overall})`;
  if (visible.length === 0) {
    box.replaceChildren(el('p', { class: 'ok' }, 'No flags in this range.'));
    return;
  }
  const groups = new Map();
  for (const f of visible) groups.set(f.kind, [...(groups.get(f.kind) ?? []), f]);
  // Distribution flags (few, about a whole engine or pairing) first within a severity, then lifecycle kinds by count.
  const ordered = [...groups.entries()].sort(
    ([, a], [, b]) =>
      (SEVERITY[a[0].severity] ?? 9) - (SEVERITY[b[0].severity] ?? 9) ||
      (a[0].request_id === undefined ? 0 : 1) - (b[0].request_id === undefined ? 0 : 1) ||
      b.length - a.length,
  );
  box.replaceChildren(
    ...ordered.map(([kind, list]) => {
      const head = list.slice(0, PER_KIND_VISIBLE).map((f) => flagItem(f, window));
      const rest = list.slice(PER_KIND_VISIBLE).map((f) => flagItem(f, window));
      return el(
        'div',
        { class: `flag-group sev-${list[0].severity}`, 'data-kind': kind },
        el(
          'h3',
          {},
          el('span', { class: `badge sev-${list[0].severity}` }, list[0].severity),
          ` ${kind} `,
          el('span', { class: 'count' }, `× ${countOf(kind)}`),
          countOf(kind) > list.length ? el('span', { class: 'muted' }, ` (the ${list.length} most recent listed)`) : null,
        ),
        el('ul', {}, head),
        rest.length ? el('details', {}, el('summary', {}, `${rest.length} more ${kind}`), el('ul', {}, rest)) : null,
      );
    }),
  );
}

function renderPairing(rows) {
  const pairs = rows
    .filter((r) => r.scope_kind === 'pairing')
    .map((r) => ({ ...r, share: r.drained + r.timeouts > 0 ? r.timeouts / (r.drained + r.timeouts) : 0 }))
    .sort((a, b) => b.share - a.share || b.holds - a.holds);
  const box = document.getElementById('pairing-table');
  if (pairs.length === 0) {
    box.replaceChildren(el('p', { class: 'muted' }, 'No holds with a known version pairing in this range.'));
    return;
  }
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  box.replaceChildren(
    table(
      [
        { title: 'cluster', value: (r) => r.cluster },
        { title: 'prefill version', value: (r) => r.prefill_version },
        { title: 'decode version', value: (r) => r.decode_version },
        { title: 'backend', value: (r) => r.backend },
        { title: 'holds', value: (r) => r.holds, num: true },
        { title: 'drained', value: (r) => r.drained, num: true },
        { title: 'timeouts', value: (r) => r.timeouts, num: true },
        { title: 'open', value: (r) => r.open, num: true },
        { title: 'timeout share', value: (r) => pct(r.share), num: true },
      ],
      pairs,
      (r) => (r.share >= 0.95 && r.drained + r.timeouts >= 20 ? 'bad' : r.share > 0.05 ? 'warn' : ''),
    ),
  );
}

async function chart(name, window) {
  const container = document.getElementById(`chart-${name}`);
  try {
    const spec = await getJson(`/charts/${name}.json`, {
      from: window.from,
      to: window.to,
      cluster: state.cluster,
      decode_engine: state.engine,
    });
    await embed(container, spec);
  } catch (error) {
    container.replaceChildren(el('p', { class: 'error' }, `chart failed: ${error.message}`));
    throw error;
  }
}

let timer;
async function load() {
  clearTimeout(timer);
  const window = windowOf(state);
  setStatus('loading…');
  for (const a of document.querySelectorAll('a.svg-link'))
    a.setAttribute(
      'href',
      url(`/charts/${a.dataset.chart}.svg`, { from: window.from, to: window.to, cluster: state.cluster, decode_engine: state.engine }),
    );
  const results = await Promise.allSettled([
    getJson('/api/flags', { from: window.from, to: window.to, cluster: state.cluster }).then((b) => renderFlags(b.flags, b.totals, window)),
    getJson('/api/queries/hold_resolution_groups', { from: window.from, to: window.to, cluster: state.cluster }).then((b) => {
      fillSelect(
        'cluster',
        b.rows.map((r) => r.cluster),
      );
      fillSelect(
        'engine',
        b.rows.filter((r) => r.scope_kind === 'decode_engine').map((r) => r.decode_engine),
      );
      renderPairing(b.rows);
    }),
    chart('resolution', window),
    chart('tails', window),
    chart('kv_pinned', window),
  ]);
  const failed = results.filter((r) => r.status === 'rejected');
  if (failed.length) setStatus(`${failed.length} part(s) failed: ${failed[0].reason?.message ?? failed[0].reason}`, true);
  else
    setStatus(
      `updated ${new Date().toISOString().slice(11, 19)} UTC · ${window.from.slice(0, 16).replace('T', ' ')} → ${window.to.slice(0, 16).replace('T', ' ')}`,
    );
  document.body.dataset.loaded = 'true';
  if (state.refresh > 0 && state.range !== 'custom') timer = setTimeout(load, state.refresh * 1000);
}

bindControls(state, (next) => {
  location.search = stateQuery(next).toString();
});
load();
