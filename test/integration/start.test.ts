import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, describe, it } from 'node:test';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { createPdEmitter } from '../../emitter/index.ts';
import { startHoldscope, stopHoldscope } from '../support/start-process.ts';

const start = startHoldscope;
const stop = stopHoldscope;

async function poll(url: string, timeoutMs: number, init?: RequestInit): Promise<Response> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(url, init);
    if (res.status === 200 || Date.now() > deadline) return res;
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('holdscope start', () => {
  const running: ChildProcess[] = [];
  after(async () => {
    for (const child of running) await stop(child);
  });

  it('serves lifecycles from simulated engines within seconds', async (t) => {
    const s = await start(['--seed', '4242', '--scenario', 'steady']);
    running.push(s.child);
    const began = Date.now();
    const res = await poll(`http://127.0.0.1:${s.httpPort}/api/lifecycles/s4242-000001`, 15_000);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { lifecycles: { generation: number; admission_outcome: string }[] };
    assert.equal(body.lifecycles[0]?.generation, 0);
    t.diagnostic(`ready in ${s.startedInMs} ms; first lifecycle served ${Date.now() - began} ms later`);
    const metrics = await fetch(`http://127.0.0.1:${s.httpPort}/metrics`);
    assert.equal(metrics.status, 200);
    const text = await metrics.text();
    for (const family of [
      'holdscope_hold_timeout_share',
      'holdscope_flags',
      'holdscope_pipeline_rows_inserted_total',
      'holdscope_collector_spans_received_total',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${family} `, 'm'), family);
    }
    assert.match(text, /^holdscope_collector_spans_received_total [1-9]\d*$/m, 'the collector counted the simulated spans');
    assert.equal(await stop(s.child), 0, 'a clean shutdown on SIGINT');
  });

  it('with --no-simulate, spans from an OTLP exporter reach /api/lifecycles/:id', async () => {
    const s = await start(['--no-simulate']);
    running.push(s.child);
    const provider = new TracerProvider({
      resource: resourceFromAttributes({
        'pd.role': 'decode',
        'pd.engine.id': 'decode-ext',
        'pd.engine.version': 'v9',
        'pd.transfer.backend': 'nixl',
        'pd.kv.capacity_slots': 4096,
      }),
      spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `http://127.0.0.1:${s.otlpPort}/v1/traces` }) })],
    });
    const pd = createPdEmitter(provider.getTracer('external-engine'));
    const req = { requestId: 'external-<script>-1', generation: 3 };
    const t0 = Date.now() - 1000;
    pd.kvAllocated(req, { pages: [7, 8], slots: 32 }, { time: t0 });
    pd.holdStarted(req, { expectedRanks: [0], timeoutMs: 30000, slots: 32, pages: [7, 8] }, { time: t0 + 10 });
    pd.ackReceived(req, { rank: 0, ackGeneration: 3, accepted: true }, { time: t0 + 25 });
    pd.released(req, { reason: 'drained', pages: [7, 8] }, { time: t0 + 25 });
    await provider.forceFlush();
    await provider.shutdown();
    const res = await poll(`http://127.0.0.1:${s.httpPort}/api/lifecycles/${encodeURIComponent(req.requestId)}`, 10_000);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { request_id: string; lifecycles: Record<string, unknown>[] };
    assert.equal(body.request_id, req.requestId);
    assert.equal(body.lifecycles.length, 1);
    assert.deepEqual(
      {
        generation: body.lifecycles[0]?.generation,
        resolution: body.lifecycles[0]?.resolution,
        hold_ms: body.lifecycles[0]?.hold_ms,
        decode_engine: body.lifecycles[0]?.decode_engine,
      },
      { generation: 3, resolution: 'drained', hold_ms: 15, decode_engine: 'decode-ext' },
    );
    // Without Kafka the in-process queue acknowledges once ClickHouse has the rows; the count must say so too.
    const metrics = await (await fetch(`http://127.0.0.1:${s.httpPort}/metrics`)).text();
    assert.match(metrics, /^holdscope_collector_spans_accepted_total 4$/m, 'the four spans exported, each counted once');
  });

  it('honours both tokens: its simulated engines send the collector token, and no door opens without them', async () => {
    const collectorToken = 'collector-token-0123456789';
    const httpToken = 'http-token-0123456789abcdef';
    const s = await start(['--seed', '4343', '--scenario', 'steady'], {
      HOLDSCOPE_COLLECTOR_TOKEN: collectorToken,
      HOLDSCOPE_HTTP_TOKEN: httpToken,
    });
    running.push(s.child);
    const api = `http://127.0.0.1:${s.httpPort}`;
    const otlp = `http://127.0.0.1:${s.otlpPort}/v1/traces`;
    // The simulated engines' spans are stored, so they sent the token; the scheme is read in any case.
    const stored = await poll(`${api}/api/lifecycles/s4343-000001`, 15_000, { headers: { authorization: `bEaReR ${httpToken}` } });
    assert.equal(stored.status, 200);
    const span = JSON.stringify({ resourceSpans: [] });
    const post = (headers: Record<string, string>) =>
      fetch(otlp, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: span });
    assert.equal((await post({})).status, 401, 'the collector without a token');
    assert.equal((await post({ authorization: `Bearer ${httpToken}` })).status, 401, "the collector with the HTTP port's token");
    assert.equal((await post({ authorization: `bearer ${collectorToken}` })).status, 200, 'the collector, scheme in lower case');
    assert.equal((await post({ authorization: `BEARER ${collectorToken}`, 'content-type': 'constructor' })).status, 415);
    assert.equal((await post({ authorization: `Bearer ${collectorToken}`, 'content-type': '__proto__' })).status, 415);
    assert.equal((await fetch(`${api}/api/lifecycles/s4343-000001`)).status, 401, 'the read API without a token');
    assert.equal((await fetch(`${api}/metrics`)).status, 401, '/metrics without a token');
    for (const path of ['/healthz', '/readyz']) assert.equal((await fetch(`${api}${path}`)).status, 200, path);
    const authorized = { headers: { authorization: `Bearer ${httpToken}` } };
    for (const path of [
      '/vendor/constructor',
      '/vendor/__proto__',
      '/vendor/toString',
      '/static/constructor',
      '/static/..%2f..%2fpackage.json',
      '/nowhere',
    ]) {
      const res = await fetch(`${api}${path}`, authorized);
      const body = await res.text();
      assert.equal(res.status, 404, path);
      assert.doesNotMatch(body, /\bat |\/work\/|node_modules|\.ts:/, `${path}: no stack trace or file path`);
    }
    const every = await Promise.all(
      [`${api}/`, `${api}/api/lifecycles/none`, `${api}/vendor/nothing`, `${api}/api/flags`, `${api}/healthz`].map((url) =>
        fetch(url, authorized),
      ),
    );
    for (const res of every) assert.equal(res.headers.get('x-content-type-options'), 'nosniff', `${res.url} (${res.status})`);
    const to9999 = await fetch(`${api}/api/flags?from=2026-01-01T00:00:00Z&to=9999-12-31T00:00:00Z`, authorized);
    assert.equal(to9999.status, 400, "a window past any limit is the caller's error");
    const otlpAnswers = await Promise.all([
      post({}),
      fetch(`${otlp.replace('/v1/traces', '/nowhere')}`),
      post({ authorization: `Bearer ${collectorToken}` }),
    ]);
    for (const res of otlpAnswers) assert.equal(res.headers.get('x-content-type-options'), 'nosniff', `collector ${res.status}`);
    assert.equal(await stop(s.child), 0);
  });
});
