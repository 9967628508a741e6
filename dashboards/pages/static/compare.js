/* global document, location, history, URLSearchParams */
// The Compare view of the on-call page: the form's inputs are named with /api/compare's keys; their values live in
// the page URL beside the header's (a pasted link reproduces the comparison). One read, /charts/compare.json, gives
// both the chart and the comparison behind it (usermeta.comparison), so the table and the chart show the same
// samples. Every value from the records (engine names, versions, notes naming selectors) reaches the DOM as text.
import { el, embed, getJson, table, url } from './common.js';

/** Every key of a comparison, as /api/compare names them. */
// The form's inputs carry /api/compare's keys as their names, rendered by the server from the one list of selector keys
// (queries/compare-selector.ts): the keys are read from the form rather than copied here.
// Arm by arm (both, baseline, candidate, then rollout_at and window), as links and the page URL have always put them.
const PREFIXES = ['both', 'baseline', 'candidate'];
const prefixRank = (name) => {
  const at = PREFIXES.indexOf(name.split('.')[0]);
  return at === -1 ? PREFIXES.length : at;
};
const compareKeys = () =>
  [...document.querySelectorAll('#compare-form [name]')].map((input) => input.name).sort((a, b) => prefixRank(a) - prefixRank(b));

/** The comparison's keys present in the page URL. */
export function compareParams(search = location.search) {
  const q = new URLSearchParams(search);
  const out = {};
  for (const key of compareKeys()) if (q.get(key)) out[key] = q.get(key);
  return out;
}

/** A metric's numbers in its unit: shares as %, their differences in percentage points. */
function unitOf(metric) {
  switch (metric.unit) {
    case 'share':
      return { factor: 100, value: '%', diff: ' pp', digits: 2 };
    case 'ms':
      return { factor: 1, value: ' ms', diff: ' ms', digits: 1 };
    case 'holds':
      return { factor: 1, value: '', diff: '', digits: 0 };
    default:
      return { factor: 1, value: '', diff: '', digits: 2 };
  }
}

const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const fixed = (x, digits) => x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const signed = (x, digits) => `${x > 0 ? '+' : x < 0 ? '−' : '±'}${fixed(Math.abs(x), digits)}`;

function cells(m) {
  const u = unitOf(m);
  const value = (x) => (isNum(x) ? `${fixed(x * u.factor, u.digits)}${u.value}` : '—');
  const diff = (x) => (isNum(x) ? `${signed(x * u.factor, u.digits)}${u.diff}` : '—');
  // An unbounded side is null in JSON: the data do not reach that far.
  const bound = (x, side) => (isNum(x) ? signed(x * u.factor, u.digits) : side < 0 ? '−∞' : '+∞');
  return {
    baseline: value(m.baseline),
    candidate: value(m.candidate),
    difference: diff(m.difference),
    interval: m.interval ? `[${bound(m.interval.lower, -1)}, ${bound(m.interval.upper, 1)}]${u.diff}` : '—',
    // Infinite (null in JSON) where a quantile's interval is unbounded: no difference could have been found.
    mdd: isNum(m.minimumDetectableDifference)
      ? `±${fixed(m.minimumDetectableDifference * u.factor, u.digits)}${u.diff}`
      : m.verdict === 'no detectable difference'
        ? '∞'
        : '',
  };
}

function renderArms(report) {
  const arm = (name) => {
    const a = report[name];
    const s = a.summary;
    return el(
      'p',
      { class: `arm arm-${name}` },
      el('b', {}, name),
      ' ',
      el('span', { class: 'selector' }, a.description),
      el('span', { class: 'muted' }, ` · ${s.holds.toLocaleString('en-US')} holds, ${s.stormWindows} storm window(s)`),
    );
  };
  document.getElementById('compare-arms').replaceChildren(arm('baseline'), arm('candidate'));
}

function renderTable(report) {
  const verdictClass = { worse: 'bad', better: 'good' };
  document.getElementById('compare-table').replaceChildren(
    table(
      [
        { title: 'metric', value: (m) => m.label },
        { title: 'baseline', value: (m) => cells(m).baseline, num: true },
        { title: 'candidate', value: (m) => cells(m).candidate, num: true },
        { title: 'difference', value: (m) => cells(m).difference, num: true },
        { title: `${Math.round(report.confidence * 100)}% interval`, value: (m) => cells(m).interval, num: true },
        { title: 'verdict', value: (m) => el('span', { class: 'verdict' }, m.verdict ?? '') },
        { title: 'min. detectable', value: (m) => cells(m).mdd, num: true },
        { title: 'method', value: (m) => m.method ?? '' },
        { title: 'note', value: (m) => el('span', { class: 'note' }, m.note ?? '') },
      ],
      report.metrics,
      (m) => verdictClass[m.verdict] ?? '',
    ),
  );
  for (const [i, tr] of [...document.querySelectorAll('#compare-table tbody tr')].entries())
    tr.setAttribute('data-metric', report.metrics[i].metric);
}

function setCompareStatus(text, isError = false) {
  const s = document.getElementById('compare-status');
  s.textContent = text;
  s.classList.toggle('error', isError);
}

/** Runs the comparison of `params` and renders it; a refused key (400) is shown as the API says it. */
async function run(params) {
  const container = document.getElementById('chart-compare');
  const section = document.getElementById('compare');
  delete section.dataset.rendered;
  document.getElementById('compare-svg').setAttribute('href', url('/charts/compare.svg', params));
  setCompareStatus('comparing…');
  try {
    const spec = await getJson('/charts/compare.json', params);
    const report = spec.usermeta.comparison;
    renderArms(report);
    renderTable(report);
    await embed(container, spec);
    setCompareStatus(`compared at ${new Date().toISOString().slice(11, 19)} UTC`);
  } catch (error) {
    for (const id of ['compare-arms', 'compare-table']) document.getElementById(id).replaceChildren();
    container.replaceChildren();
    setCompareStatus(String(error.message ?? error), true);
  }
  section.dataset.rendered = 'true';
}

/** Values seen on the page (clusters, engines, versions, backends) offered in the form's inputs. */
export function offerCompareValues(rows) {
  for (const list of document.querySelectorAll('datalist[id^="cmp-list-"]')) {
    const key = list.id.slice('cmp-list-'.length);
    const have = new Set([...list.options].map((o) => o.value));
    for (const v of [...new Set(rows.map((r) => r[key]))].filter(Boolean).sort()) if (!have.has(v)) list.append(el('option', { value: v }));
  }
}

/** Fills the form from the URL, compares at once when the URL names a comparison, and on each submit. */
export function initCompare() {
  const form = document.getElementById('compare-form');
  if (!form) return;
  const given = compareParams();
  for (const [key, value] of Object.entries(given)) form.elements.namedItem(key).value = value;
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const params = {};
    for (const key of compareKeys()) {
      const value = form.elements.namedItem(key).value.trim();
      if (value) params[key] = value;
    }
    // In the URL beside the header's keys, without a reload: the rest of the page keeps its state.
    const q = new URLSearchParams(location.search);
    for (const key of compareKeys()) q.delete(key);
    for (const [key, value] of Object.entries(params)) q.set(key, value);
    history.replaceState(null, '', `${location.pathname}?${q}${location.hash}`);
    void run(params);
  });
  if (Object.keys(given).length > 0) void run(given);
  else setCompareStatus('fill in the arms and press compare');
}
