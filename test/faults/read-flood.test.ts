/**
 * Readers flooding holdscope while spans flow, on the all-in-one's parts: embedded ClickHouse (chdb) in this process,
 * the collector writing through the in-process queue (a 200 means the spans are stored), and the read API on a
 * read client of its own (queries/read-gate.ts, openReadClient), as `holdscope start` runs them.
 *
 * The store holds a week of lifecycles (copies of a simulated `mixed` run spread over the max read window). Then,
 * while engines send spans at a steady rate and retry on 429/503 as OTLP exporters do, twenty clients keep
 * /api/flags busy over the widest range a read may ask for (the max read window, 7 days), and a prober asks
 * /healthz ten times a second.
 *
 * The promise under test (docs/operations.md, "Read limits"): nothing a reader does stops holdscope. /healthz p99 stays
 * under 1 s, every span sent during the flood is stored, every /api/flags is answered 200 or, past the read queue,
 * 503 with Retry-After (never 500, never a dead process).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { encodeOtlpProtobuf } from '../../contract/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue } from '../../pipeline/index.ts';
import { DEFAULT_READ_LIMITS, openReadClient, readGateStats } from '../../queries/index.ts';
import { buildQueryDataset } from '../bench/page-queries.ts';
import { holdRequest, holdSpan, nowNs } from '../support/fuzz-otlp.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';

/** Lifecycles in the store, spread over the max read window. */
const STORED_LIFECYCLES = 100_000;
/** Readers of /api/flags over the widest window, each sending its next request once the last is answered. */
const READERS = 20;
/** How long the readers keep at it. */
const FLOOD_MS = 15_000;
/** Spans sent: a request of SPANS_PER_REQUEST every SEND_EVERY_MS (500 spans/s), whatever the answers. */
const SEND_EVERY_MS = 50;
const SPANS_PER_REQUEST = 25;
/** /healthz asked this often. */
const PROBE_EVERY_MS = 100;

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] as number);
};

describe('faults: read flood (20 widest /api/flags on a populated store while spans flow, embedded ClickHouse)', () => {
  const closers: (() => Promise<unknown>)[] = [];
  after(async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  });

  it(
    'keeps /healthz under 1 s (p99) and stores every span sent; reads answer 200 or 503 with Retry-After',
    { timeout: 300_000 },
    async (t) => {
      const started = Date.now();
      const step = (what: string) => t.diagnostic(`${((Date.now() - started) / 1000).toFixed(1)} s: ${what}`);
      const dataPath = mkdtempSync(join(tmpdir(), 'holdscope-read-flood-'));
      // A week of lifecycles is a few hundred MB: gone once both clients are closed.
      closers.push(async () => rmSync(dataPath, { recursive: true, force: true }));
      const client: ClickHouseClient = await createClickHouse({ dataPath });
      closers.push(() => client.close());

      // 1. A week of lifecycles: a simulated run, copied over the max read window, records computed and merged.
      const template = randomDatabase('rf_template');
      await loadScenario(client, template, 'mixed', 11, (c) => {
        c.requests = 2000;
      });
      const database = randomDatabase('rf');
      const windowMs = DEFAULT_READ_LIMITS.maxReadWindowMs;
      const copies = Math.ceil(STORED_LIFECYCLES / 2000);
      const dataset = await buildQueryDataset({
        client,
        templateDb: template,
        database,
        lifecycles: STORED_LIFECYCLES,
        endMs: Date.now() - 60_000,
        strideMs: Math.floor((windowMs - 3_600_000) / copies),
      });
      step(
        `store: ${dataset.lifecycles} lifecycles, ${dataset.spans} spans over ${dataset.hours.toFixed(0)} hours, built in ${dataset.seconds.toFixed(0)} s`,
      );

      // 2. The all-in-one's parts: collector -> in-process queue -> writer on one client; the read API on another.
      const pipelineMetrics = createPipelineMetrics();
      const writer = createWriter(
        client,
        { database, maxBatchRows: 50_000, lingerMs: 100, refreshIntervalMs: 1000 },
        pipelineMetrics,
        quietLog,
      );
      const queue = new InProcessQueue(writer, { maxPendingSpans: 200_000, timeoutMs: 10_000, metrics: pipelineMetrics, log: quietLog });
      const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
      const otlpPort = await collector.start();
      closers.push(() => collector.shutdown());
      const readClient = await openReadClient({ dataPath });
      closers.push(() => readClient.close());
      const registry = new Registry();
      const api = await startHttpServer({
        port: 0,
        host: '127.0.0.1',
        client: readClient,
        database,
        log: quietLog,
        metricsRegistry: registry,
      });
      closers.push(() => api.close());
      const base = `http://127.0.0.1:${api.port}`;

      // 3. Spans flow: one request every SEND_EVERY_MS, each retried on 429/503 (after Retry-After) until stored.
      const runId = randomBytes(4).toString('hex');
      const traceId = randomBytes(16).toString('hex');
      const sent: { spanIds: string[]; tries: number; ackMs?: number }[] = [];
      const sends: Promise<void>[] = [];
      const sendOne = async (index: number) => {
        const t0 = nowNs();
        const spans = Array.from({ length: SPANS_PER_REQUEST }, (_, k) =>
          holdSpan(
            `rf-${runId}-${index}-${k % 5}`,
            runId + (index * SPANS_PER_REQUEST + k).toString(16).padStart(8, '0'),
            traceId,
            t0 + BigInt(k),
          ),
        );
        const record: (typeof sent)[number] = { spanIds: spans.map((s) => s.spanId), tries: 0 };
        sent.push(record);
        const body = Buffer.from(encodeOtlpProtobuf(holdRequest(spans)));
        const began = performance.now();
        for (;;) {
          record.tries++;
          const res = await fetch(`http://127.0.0.1:${otlpPort}/v1/traces`, {
            method: 'POST',
            body,
            headers: { 'content-type': 'application/x-protobuf' },
            signal: AbortSignal.timeout(30_000),
          }).catch(() => undefined);
          await res?.arrayBuffer();
          if (res?.status === 200) break;
          await sleep(1000 * Math.max(1, Number(res?.headers.get('retry-after') ?? 1)));
        }
        record.ackMs = performance.now() - began;
      };
      let sending = true;
      const sender = (async () => {
        for (let i = 0; sending; i++) {
          sends.push(sendOne(i));
          await sleep(SEND_EVERY_MS);
        }
      })();

      // 4. /healthz ten times a second, each timed on its own (a stalled event loop delays them all).
      const health: number[] = [];
      const probes: Promise<void>[] = [];
      const prober = setInterval(() => {
        const began = performance.now();
        probes.push(
          fetch(`${base}/healthz`, { signal: AbortSignal.timeout(30_000) }).then(
            async (res) => {
              await res.arrayBuffer();
              health.push(res.status === 200 ? performance.now() - began : Infinity);
            },
            () => void health.push(Infinity),
          ),
        );
      }, PROBE_EVERY_MS);

      // 5. The flood: READERS clients asking /api/flags over the widest range a read may ask for, for FLOOD_MS.
      await sleep(2000);
      // How late the event loop ran its timers: what a stalled /healthz would come from.
      const loopDelay = monitorEventLoopDelay({ resolution: 10 });
      loopDelay.enable();
      const floodStart = performance.now();
      const answers = new Map<string, number>();
      const flagTimes: number[] = [];
      const badAnswers: string[] = [];
      await Promise.all(
        Array.from({ length: READERS }, async () => {
          while (performance.now() - floodStart < FLOOD_MS) {
            const to = Date.now();
            const query = `from=${new Date(to - windowMs).toISOString()}&to=${new Date(to).toISOString()}`;
            const began = performance.now();
            const res = await fetch(`${base}/api/flags?${query}`, { signal: AbortSignal.timeout(120_000) });
            const body = (await res.json()) as { error?: string; flags?: unknown[] };
            flagTimes.push(performance.now() - began);
            answers.set(String(res.status), (answers.get(String(res.status)) ?? 0) + 1);
            if (res.status === 503 && Number(res.headers.get('retry-after')) >= 1) {
              await sleep(1000 * Number(res.headers.get('retry-after')));
            } else if (res.status !== 200) {
              badAnswers.push(`${res.status} ${body.error ?? ''}`);
            }
          }
        }),
      );
      const floodSeconds = (performance.now() - floodStart) / 1000;
      loopDelay.disable();
      sending = false;
      await sender;
      clearInterval(prober);
      await Promise.all(probes);
      await Promise.all(sends);
      step(`flood over after ${floodSeconds.toFixed(1)} s; ${sent.length} span requests acknowledged`);

      // 6. Every span sent is stored (the 200 says so; counted in ClickHouse, not taken on trust).
      await writer.flush();
      const stored = await (
        await client.query({
          query: `SELECT DISTINCT span_id FROM ${database}.spans WHERE startsWith(request_id, {prefix:String})`,
          query_params: { prefix: `rf-${runId}-` },
          format: 'JSONEachRow',
        })
      ).json<{ span_id: string }>();
      const storedIds = new Set(stored.map((r) => r.span_id));
      const sentIds = sent.flatMap((s) => s.spanIds);
      const missing = sentIds.filter((id) => !storedIds.has(id));
      const acks = sent.map((s) => s.ackMs ?? Infinity);
      const retried = sent.filter((s) => s.tries > 1).length;
      const gate = readGateStats();
      const healthP99 = percentile(health, 99);

      console.log(
        `faults: read flood: ${dataset.lifecycles} lifecycles stored over ${(windowMs / 86_400_000).toFixed(0)} days; ${READERS} readers of /api/flags over ${(windowMs / 86_400_000).toFixed(0)} days for ${floodSeconds.toFixed(1)} s: ` +
          `${[...answers].map(([s, n]) => `${n}x ${s}`).join(', ')}, answered in p50 ${percentile(flagTimes, 50).toFixed(0)} / p99 ${percentile(flagTimes, 99).toFixed(0)} ms, ${gate.refused} read queries refused at the queue; ` +
          `/healthz ${health.length} probes p50 ${percentile(health, 50).toFixed(0)} / p99 ${healthP99.toFixed(0)} / max ${Math.max(...health).toFixed(0)} ms, ` +
          `event loop delay p99 ${(loopDelay.percentile(99) / 1e6).toFixed(0)} / max ${(loopDelay.max / 1e6).toFixed(0)} ms; ` +
          `spans ${sentIds.length} sent in ${sent.length} requests (${retried} retried), ${sentIds.length - missing.length} stored, acknowledged in p50 ${percentile(acks, 50).toFixed(0)} / p99 ${percentile(acks, 99).toFixed(0)} ms; ` +
          `wall ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );

      assert.deepEqual(badAnswers.slice(0, 5), [], `${badAnswers.length} /api/flags answers other than 200 and 503 with Retry-After`);
      // ClickHouse serves the widest reads one at a time here (embedded): the rest are refused, and come back.
      assert.ok((answers.get('200') ?? 0) >= 5, `widest reads kept being served: ${[...answers]}`);
      assert.ok(health.length >= (FLOOD_MS / PROBE_EVERY_MS) * 0.8, `${health.length} probes`);
      assert.ok(healthP99 < 1000, `/healthz p99 ${healthP99} ms`);
      assert.deepEqual(missing.slice(0, 5), [], `${missing.length} of ${sentIds.length} spans sent are not stored`);
      // Not stalled either: acknowledged within the in-process queue's 10 s, past which senders are told 503.
      assert.ok(percentile(acks, 99) < 10_000, `span requests acknowledged in p99 ${percentile(acks, 99)} ms`);
      assert.ok(sent.length >= (FLOOD_MS / SEND_EVERY_MS) * 0.8, `${sent.length} span requests sent`);
    },
  );
});
