/* global document, location, URLSearchParams */
import { bindControls, compactRanges, el, embed, getJson, readState, requestHref, setStatus, stateQuery, table } from './common.js';

const state = readState();
const requestId = decodeURIComponent(location.pathname.slice('/requests/'.length));
const cluster = new URLSearchParams(location.search).get('cluster') ?? '';

function renderLifecycles(lifecycles) {
  document.getElementById('lifecycles').replaceChildren(
    table(
      [
        { title: 'cluster', value: (r) => r.cluster },
        { title: 'gen', value: (r) => r.generation, num: true },
        { title: 'decode engine', value: (r) => r.decode_engine },
        { title: 'backend', value: (r) => r.backend },
        { title: 'resolution', value: (r) => r.resolution },
        { title: 'release', value: (r) => r.release_reason },
        { title: 'hold start', value: (r) => r.hold_start ?? '' },
        { title: 'timeout (ms)', value: (r) => r.hold_timeout_ms, num: true },
        { title: 'released at', value: (r) => r.release_at ?? '' },
        { title: 'late writes', value: (r) => r.late_writes, num: true },
        { title: 'in flight at release', value: (r) => r.in_flight_at_release, num: true },
      ],
      lifecycles,
      (r) => (r.late_writes > 0 ? 'bad' : ''),
    ),
  );
}

function renderVictims(rows) {
  const box = document.getElementById('victims');
  if (rows.length === 0) {
    box.replaceChildren(el('p', { class: 'ok' }, 'No write of this request landed after its release.'));
    return;
  }
  const writes = new Map();
  for (const r of rows) {
    const key = JSON.stringify([r.cluster, r.generation, r.rank, r.chunk_index]);
    const w = writes.get(key) ?? { ...r, pages: [], victims: new Map(), free: [] };
    if (r.victim_request_id) {
      const vk = JSON.stringify([r.victim_request_id, r.victim_generation]);
      const v = w.victims.get(vk) ?? { request_id: r.victim_request_id, generation: r.victim_generation, pages: [] };
      v.pages.push(r.page);
      w.victims.set(vk, v);
    } else w.free.push(r.page);
    writes.set(key, w);
  }
  box.replaceChildren(
    el(
      'ul',
      { class: 'writes' },
      [...writes.values()].map((w) =>
        el(
          'li',
          { class: 'late-write' },
          el('p', {}, `generation ${w.generation}, rank ${w.rank}, chunk ${w.chunk_index} landed at ${w.landed_at} on ${w.decode_engine}`),
          el(
            'ul',
            {},
            [...w.victims.values()].map((v) =>
              el(
                'li',
                { class: 'victim' },
                'victim ',
                el('a', { href: requestHref(v.request_id, w.cluster) }, v.request_id),
                ` generation ${v.generation}, pages ${compactRanges(v.pages)}`,
              ),
            ),
            w.free.length ? el('li', { class: 'free' }, `pages free when it landed: ${compactRanges(w.free)}`) : null,
          ),
        ),
      ),
    ),
  );
}

async function load() {
  setStatus('loading…');
  const parts = await Promise.allSettled([
    getJson(`/api/lifecycles/${encodeURIComponent(requestId)}`, { cluster }).then(async (body) => {
      renderLifecycles(body.lifecycles);
      const seen = body.lifecycles.flatMap((l) => [Date.parse(l.first_seen), Date.parse(l.last_seen)]).filter(Number.isFinite);
      const from = new Date(Math.min(...seen) - 3_600_000).toISOString();
      const to = new Date(Math.max(...seen) + 3_600_000).toISOString();
      const victims = await getJson('/api/queries/late_write_victims', { from, to, cluster, request_id: requestId });
      renderVictims(victims.rows);
    }),
    getJson('/charts/timeline.json', { request_id: requestId, cluster }).then((spec) =>
      embed(document.getElementById('chart-timeline'), spec),
    ),
  ]);
  const failed = parts.filter((p) => p.status === 'rejected');
  if (failed.length) {
    setStatus(String(failed[0].reason?.message ?? failed[0].reason), true);
    if (document.getElementById('lifecycles').querySelector('.muted'))
      document.getElementById('lifecycles').replaceChildren(el('p', { class: 'error' }, String(failed[0].reason?.message ?? '')));
  } else setStatus('loaded');
  document.body.dataset.loaded = 'true';
}

bindControls(state, (next) => {
  location.href = `/?${stateQuery(next)}`;
});
load();
