/* global document */
// The hold-timeout advice section of the on-call page, from /api/advice over the page's window. Engine names,
// versions and backends are span text: they reach the DOM as text nodes (common.js el/table), never as markup.
import { el, getJson, table } from './common.js';

/**
 * The advice reads every pairing's tails (a sample of up to 50,000 each) and re-pins the worst storm: heavier than the
 * rest of the page, and slow to change, so the page's timed refresh repeats it at most this often.
 */
const ADVICE_REFRESH_MS = 5 * 60_000;

const ms = (x) => (typeof x === 'number' && Number.isFinite(x) ? Math.ceil(x).toLocaleString('en-US') : '∞');
const pct = (x) => (typeof x === 'number' ? `${(100 * x).toFixed(1)}%` : '—');
const slotSeconds = (x) => (typeof x === 'number' ? x.toLocaleString('en-US', { maximumFractionDigits: 1 }) : '—');

/** The advised timeout with its interval, or why there is none. */
function advisedText(g) {
  const a = g.advice;
  if (a.method === 'too-few') return el('span', { class: 'too-few', title: g.summary }, `too few holds: ${a.n}`);
  const how = a.method === 'empirical' ? 'empirical quantile' : 'fitted tail';
  return el('span', { title: `${how} of ${a.n} holds` }, `${ms(a.timeoutMs)} ms [${ms(a.lowerMs)}, ${ms(a.upperMs)}]`);
}

/** Today's timeout against the advice's interval: below it is too short (writes land after release), above it costs KV. */
function standing(g) {
  const a = g.advice;
  if (a.method === 'too-few') return '';
  const today = g.today.timeout_common_ms;
  if (today < a.lowerMs) return 'too short';
  if (typeof a.upperMs === 'number' && today > a.upperMs) return 'longer than needed';
  return 'within the interval';
}

function stormText(g) {
  const s = g.storm;
  if (!s) return 'no storm';
  const bound = s.truncated ? '≥ ' : '';
  return `${bound}${pct(s.peak_share_today)} today → ${bound}${pct(s.peak_share_at_advised)} advised (${s.aborts} aborts at ${s.window_start.slice(11, 19)})`;
}

function render(report, engine) {
  const groups = engine ? report.groups.filter((g) => g.decode_engine === engine) : report.groups;
  const target = `1 in ${Math.round(1 / report.target).toLocaleString('en-US')} aborts`;
  document.getElementById('advice-count').textContent = `(${groups.length}; target: a write after release in at most ${target})`;
  const box = document.getElementById('advice-table');
  if (groups.length === 0) {
    box.replaceChildren(el('p', { class: 'muted' }, 'No aborted holds in this range to advise from.'));
    return;
  }
  const today = (g) =>
    g.today.timeout_common_ms === g.today.timeout_max_ms
      ? `${ms(g.today.timeout_common_ms)} ms`
      : `${ms(g.today.timeout_common_ms)} ms (max ${ms(g.today.timeout_max_ms)})`;
  box.replaceChildren(
    table(
      [
        { title: 'cluster', value: (g) => g.cluster },
        { title: 'prefill version', value: (g) => g.prefill_version },
        { title: 'decode version', value: (g) => g.decode_version },
        { title: 'backend', value: (g) => g.backend },
        { title: 'decode engine', value: (g) => g.decode_engine },
        { title: 'holds', value: (g) => g.holds, num: true },
        { title: 'advised timeout [95%]', value: advisedText, num: true },
        { title: 'today', value: today, num: true },
        { title: 'today is', value: standing },
        { title: 'slot-s per abort today', value: (g) => slotSeconds(g.today.slot_seconds_per_abort), num: true },
        { title: 'slot-s per abort advised', value: (g) => slotSeconds(g.cost.slot_seconds_per_abort_at_advised), num: true },
        { title: 'worst storm: KV pinned', value: stormText },
        { title: 'notes', value: (g) => el('span', { class: 'note' }, g.notes.join(' · ')) },
      ],
      groups,
      (g) => (standing(g) === 'too short' ? 'bad' : g.notes.length > 0 ? 'warn' : ''),
    ),
  );
}

let last = { key: '', at: 0 };
/**
 * Loads the advice of the window; a timed refresh of the same range and cluster within ADVICE_REFRESH_MS keeps the
 * table as it is. `force`: the window or filters changed (a navigation), or the page was just opened.
 */
export async function loadAdvice(window, state, force = false) {
  const key = JSON.stringify([state.range, state.range === 'custom' ? window : '', state.cluster, state.engine]);
  if (!force && key === last.key && Date.now() - last.at < ADVICE_REFRESH_MS) return;
  try {
    const report = await getJson('/api/advice', { from: window.from, to: window.to, cluster: state.cluster });
    render(report, state.engine);
    last = { key, at: Date.now() };
  } catch (error) {
    document.getElementById('advice-table').replaceChildren(el('p', { class: 'error' }, `advice failed: ${error.message}`));
    throw error;
  }
}
