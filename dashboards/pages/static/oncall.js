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
  shortTime,
  stateQuery,
  svgEl,
  table,
  url,
  windowOf,
} from './common.js';
import { loadAdvice } from './advice.js';
import { compareParams, initCompare, offerCompareValues } from './compare.js';

const state = readState();
const SEVERITY = { critical: 0, warning: 1, info: 2 };
/** Where a distribution flag's evidence is: its chart on this page and the named query behind it. */
const EVIDENCE = {
  timeout_heavy: { anchor: '#resolution', query: 'hold_resolution_groups', label: 'resolution chart' },
  pairing_incompatible: { anchor: '#pairing', query: 'hold_resolution_groups', label: 'pairing review' },
  long_transfer_tail: { anchor: '#tails', query: 'transfer_tails', label: 'tails chart' },
  kv_capacity_exhaustion: { anchor: '#kv_pinned', query: 'kv_pinned', label: 'KV chart' },
};

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

/** Violations per bucket as bars: one rect per non-empty bucket, on a baseline spanning the page's window. */
function sparkline({ bucketSeconds, counts }, violations) {
  const width = 160;
  const height = 28;
  const step = width / Math.max(1, counts.length);
  const peak = Math.max(1, ...counts);
  const label = `${violations} violation(s), at most ${peak} per ${bucketSeconds} s`;
  return svgEl(
    'svg',
    { class: 'sparkline', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label },
    svgEl('title', {}, label),
    svgEl('line', { x1: 0, x2: width, y1: height - 0.5, y2: height - 0.5, class: 'baseline' }),
    counts.map((count, i) => {
      if (!count) return null;
      const h = Math.max(2, Math.round((count / peak) * (height - 2)));
      return svgEl(
        'rect',
        { x: (i * step).toFixed(2), y: height - h, width: Math.max(1, step - 0.5).toFixed(2), height: h },
        svgEl('title', {}, `${count}`),
      );
    }),
  );
}

/** The engines, versions and backend of an incident, each value as text. */
function culpritParts(culprit, cluster) {
  const part = (label, name, version) =>
    el(
      'span',
      { class: 'part' },
      `${label} `,
      el('b', {}, name || 'unknown'),
      version ? el('span', { class: 'version' }, ` ${version}`) : null,
    );
  return el(
    'p',
    { class: 'culprit' },
    part('decode', culprit.decode_engine, culprit.decode_version),
    part('prefill', culprit.prefill_engine, culprit.prefill_version),
    part('backend', culprit.backend),
    part('cluster', cluster),
  );
}

function incidentRow(incident) {
  const listed = incident.examples.length;
  return el(
    'li',
    { id: `incident-${incident.id}`, class: `incident sev-${incident.severity}`, 'data-kind': incident.kind, tabindex: '-1' },
    el(
      'div',
      { class: 'incident-head' },
      el('span', { class: `badge sev-${incident.severity}` }, incident.severity),
      el('strong', { class: 'kind' }, incident.kind),
      el('span', { class: 'violations' }, `× ${incident.violations}`),
      sparkline(incident.sparkline, incident.violations),
      el('span', { class: 'seen' }, `first ${shortTime(incident.firstSeen)} · last ${shortTime(incident.lastSeen)} UTC`),
      incident.runbook ? el('a', { class: 'runbook', href: incident.runbook }, 'runbook') : null,
      el('a', { class: 'permalink', href: `#incident-${incident.id}`, title: 'link to this incident' }, '#'),
    ),
    culpritParts(incident.culprit, incident.cluster),
    el(
      'p',
      { class: 'examples' },
      'requests: ',
      incident.examples.flatMap((e, i) => [
        i > 0 ? ', ' : null,
        el('a', { class: 'example', href: requestHref(e.request_id, incident.cluster) }, e.request_id),
        e.generation > 0 ? el('span', { class: 'muted' }, ` gen ${e.generation}`) : null,
      ]),
      incident.violations > listed ? el('span', { class: 'muted' }, ` and ${incident.violations - listed} more`) : null,
    ),
  );
}

function renderIncidents(incidents, total) {
  const box = document.getElementById('incidents');
  const visible = state.engine ? incidents.filter((i) => i.culprit.decode_engine === state.engine) : incidents;
  document.getElementById('incident-count').textContent = `(${state.engine ? visible.length : total})`;
  if (visible.length === 0) {
    box.replaceChildren(el('p', { class: 'ok' }, 'No safety violations in this range.'));
    return;
  }
  box.replaceChildren(
    ...[
      el('ol', { class: 'incident-list' }, visible.map(incidentRow)),
      total > incidents.length
        ? el('p', { class: 'muted' }, `the ${incidents.length} most recently seen of ${total} incidents are listed`)
        : null,
    ].filter(Boolean),
  );
}

let scrolledTo = '';
/** Highlights the incident the URL names (an alert's link), and scrolls to it once per navigation. */
function markIncident() {
  const id = decodeURIComponent(location.hash.slice(1));
  for (const row of document.querySelectorAll('.incident.highlight')) row.classList.remove('highlight');
  document.getElementById('incident-missing')?.remove();
  if (!id.startsWith('incident-')) return;
  const row = document.getElementById(id);
  if (!row) {
    document
      .getElementById('incidents')
      .prepend(el('p', { id: 'incident-missing', class: 'error' }, 'The incident of this link has no violation in this range or filter.'));
    return;
  }
  row.classList.add('highlight');
  if (scrolledTo === id) return;
  scrolledTo = id;
  row.scrollIntoView({ block: 'start' });
  row.focus({ preventScroll: true });
}

function flagItem(flag, window) {
  const links = [];
  if (flag.request_id !== undefined) {
    links.push(el('a', { class: 'evidence', href: requestHref(flag.request_id, flag.cluster) }, 'timeline →'));
    if (flag.incident) links.push(el('a', { class: 'evidence incident-link', href: `#incident-${flag.incident}` }, 'incident →'));
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

/** The heading of a kind's group: severity, kind, how many (and how many listed). */
function groupHead(tag, kind, list, count) {
  return el(
    tag,
    {},
    el('span', { class: `badge sev-${list[0].severity}` }, list[0].severity),
    ` ${kind} `,
    el('span', { class: 'count' }, `× ${count}`),
    count > list.length ? el('span', { class: 'muted' }, ` (the ${list.length} most recent listed)`) : null,
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
  // By severity; within one, distribution flags (few, about a whole engine or pairing, listed open) before the
  // per-request kinds (closed: the incidents above group them, and a storm lists hundreds), then by count.
  const perRequest = (list) => (list[0].request_id === undefined ? 0 : 1);
  const ordered = [...groups.entries()].sort(
    ([, a], [, b]) =>
      (SEVERITY[a[0].severity] ?? 9) - (SEVERITY[b[0].severity] ?? 9) || perRequest(a) - perRequest(b) || b.length - a.length,
  );
  box.replaceChildren(
    ...ordered.map(([kind, list]) => {
      const items = el(
        'ul',
        {},
        list.map((f) => flagItem(f, window)),
      );
      const attrs = { class: `flag-group sev-${list[0].severity}`, 'data-kind': kind };
      return perRequest(list)
        ? el('details', attrs, el('summary', {}, groupHead('span', kind, list, countOf(kind))), items)
        : el('div', attrs, groupHead('h3', kind, list, countOf(kind)), items);
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
let firstLoad = true;
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
    getJson('/api/incidents', { from: window.from, to: window.to, cluster: state.cluster }).then((b) => {
      renderIncidents(b.incidents, b.total);
      markIncident();
    }),
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
      offerCompareValues(b.rows);
    }),
    loadAdvice(window, state, firstLoad),
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
  firstLoad = false;
  document.body.dataset.loaded = 'true';
  if (state.refresh > 0 && state.range !== 'custom') timer = setTimeout(load, state.refresh * 1000);
}

globalThis.addEventListener('hashchange', () => {
  scrolledTo = '';
  markIncident();
});
bindControls(state, (next) => {
  // The Compare view's keys stay in the URL across the header's changes.
  const q = stateQuery(next);
  for (const [key, value] of Object.entries(compareParams())) q.set(key, value);
  location.search = q.toString();
});
initCompare();
load();
