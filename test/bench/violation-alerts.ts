/**
 * The bench's violation-alert latency: from the collector accepting the span that completes a violation to a real
 * Alertmanager accepting the alert holdscope pushes for it, timed by a proxy in front of Alertmanager, while the
 * freshness stage's load runs.
 */
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import { Attr, encodeOtlpProtobuf, forEachSpan, ResourceAttr, type OtlpTraceRequest } from '../../contract/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { createPdEmitter } from '../../emitter/index.ts';
import { startAlertmanager, startWebhook, type Service, type Webhook } from '../support/alerting.ts';
import { startOtlpReceiver } from '../support/otlp-sink.ts';
import type { AlertProxyMessage } from './alert-proxy.ts';

/** One probe: an OTLP request of one span that completes a violation on its own, its own incident by its decode engine. */
export interface ViolationProbe {
  decodeEngine: string;
  requestId: string;
  body: Uint8Array;
}

const PROBE_ENGINE_PREFIX = 'bench-probe-';

/**
 * `count` probes, each an ack_after_failed_send: a prefill engine's drain that had a failed send and did not withhold
 * its ack, for a request id of its own, naming decode engine `bench-probe-<n>` (a new incident, so a new alert, each).
 * Emitted through the real emitter and the OTel SDK and captured as the SDK exports them, like the workload.
 */
export async function buildViolationProbes(options: {
  count: number;
  /** Time between two probes' spans (ms), as they will be sent. */
  everyMs: number;
  idPrefix: string;
  startTimeMs: number;
}): Promise<ViolationProbe[]> {
  const captured: OtlpTraceRequest[] = [];
  const receiver = await startOtlpReceiver({ port: 0, host: '127.0.0.1', onRequest: (request) => void captured.push(request) });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      [ResourceAttr.serviceName]: 'bench-probe-prefill',
      [ResourceAttr.role]: 'prefill',
      [ResourceAttr.engineId]: 'bench-probe-prefill',
      [ResourceAttr.engineVersion]: 'bench-1',
      [ResourceAttr.transferBackend]: 'mooncake',
    }),
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${receiver.url}/v1/traces` }) })],
  });
  try {
    const prefill = createPdEmitter(provider.getTracer('bench-probe'));
    for (let n = 0; n < options.count; n++) {
      const at = options.startTimeMs + n * options.everyMs;
      prefill.drained(
        { requestId: `${options.idPrefix}-alert-probe-${n}`, generation: 0 },
        { rank: 0, chunksDropped: 0, inflight: 0, failedSends: 1, ackWithheld: false, decodeEngineId: `${PROBE_ENGINE_PREFIX}${n}` },
        { start: at, end: at + 5 },
      );
      // One export per span: each probe is a request of its own.
      await provider.forceFlush();
    }
  } finally {
    await provider.shutdown();
    await receiver.close();
  }
  return captured.map((request) => {
    let decodeEngine = '';
    let requestId = '';
    forEachSpan(request, (span) => {
      decodeEngine = String(span.attributes[Attr.decodeEngineId]);
      requestId = String(span.attributes[Attr.requestId]);
    });
    return { decodeEngine, requestId, body: encodeOtlpProtobuf(request) };
  });
}

/** A real Alertmanager behind a proxy that notes, per probe engine, when Alertmanager first accepted its firing alert. */
export interface AlertReceiver {
  /** The proxy's base URL: give it to the pipeline as its Alertmanager. */
  url: string;
  /** performance.now() of Alertmanager's first 2xx to a POST carrying the probe's firing alert, by decode engine. */
  acceptedAt: Map<string, number>;
  /** POSTs of alerts Alertmanager answered, 2xx or not. */
  posts: { accepted: number; refused: number };
  stop(): Promise<void>;
}

/** The proxy runs on a worker thread (test/bench/alert-proxy.ts says why); Alertmanager and its webhook are processes. */
export async function startAlertReceiver(): Promise<AlertReceiver> {
  const webhook: Webhook = await startWebhook();
  let alertmanager: Service | undefined;
  let proxy: Worker | undefined;
  const acceptedAt = new Map<string, number>();
  const posts = { accepted: 0, refused: 0 };
  const stop = async () => {
    if (proxy) {
      const exited = once(proxy, 'exit');
      proxy.postMessage('stop');
      await Promise.race([exited, sleep(5_000).then(() => proxy?.terminate())]);
    }
    await alertmanager?.stop();
    await webhook.close();
  };
  let port: number;
  try {
    alertmanager = await startAlertmanager(webhook.url);
    // A worker thread does not inherit tsx's loader (`node --import tsx`): the thread registers it, then loads the proxy.
    const load = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then(({ register }) => { register(); return import(${JSON.stringify(new URL('./alert-proxy.ts', import.meta.url).href)}); })`;
    proxy = new Worker(load, { eval: true, workerData: { target: alertmanager.url, enginePrefix: PROBE_ENGINE_PREFIX } });
    proxy.on('message', (message: AlertProxyMessage) => {
      if (message.kind === 'post') posts[message.ok ? 'accepted' : 'refused']++;
      // Kept as this thread's performance.now(), as the probes' sending times are.
      else if (message.kind === 'firing' && !acceptedAt.has(message.engine!))
        acceptedAt.set(message.engine!, message.atMs! - performance.timeOrigin);
    });
    const listening = new Promise<number>((resolve, reject) => {
      proxy!.on('message', (message: AlertProxyMessage) => message.kind === 'listening' && resolve(message.port!));
      proxy!.once('error', reject);
      proxy!.once('exit', (code) => reject(new Error(`the alert proxy's thread exited (${code}) before listening`)));
    });
    port = await listening;
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `http://127.0.0.1:${port}`, acceptedAt, posts, stop };
}

export interface ViolationAlertResult {
  /** Probe accepted by the collector (its 200) → Alertmanager accepted its alert, ms. */
  samplesMs: number[];
  /** The same samples by probe request id. */
  alertedAfterMs: Map<string, number>;
  /** When the collector accepted each probe, epoch ms, by request id: to place the record's storing in between. */
  acceptedAtMs: Map<string, number>;
  sent: number;
  /** Probes whose alert Alertmanager had not accepted `timeoutMs` after the collector accepted them. */
  unalerted: number;
  /** Probe requests the collector refused or failed, and that were sent again. */
  rejected: number;
}

/**
 * Sends the probes through the collector one every `everyMs`, beside whatever load runs, each at its time whether or
 * not the one before was answered; then waits until each probe's alert was accepted or `timeoutMs` passed.
 */
export async function sendViolationProbes(options: {
  probes: ViolationProbe[];
  collectorUrl: string;
  receiver: AlertReceiver;
  everyMs: number;
  timeoutMs: number;
}): Promise<ViolationAlertResult> {
  const { probes, receiver } = options;
  let rejected = 0;
  const started = performance.now();
  const sendOne = async (probe: ViolationProbe, index: number): Promise<{ probe: ViolationProbe; acceptedMs: number }> => {
    // Half a period in: the first probe goes once the load is running, not with its first request.
    const wait = started + (index + 0.5) * options.everyMs - performance.now();
    if (wait > 0) await sleep(wait);
    for (;;) {
      const res = await fetch(`${options.collectorUrl}/v1/traces`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-protobuf' },
        body: probe.body,
      }).catch(() => undefined);
      await res?.arrayBuffer();
      if (res?.ok) return { probe, acceptedMs: performance.now() };
      rejected++;
      await sleep(Number(res?.headers.get('retry-after') ?? 1) * 1000);
    }
  };
  const accepted = await Promise.all(probes.map(sendOne));
  const alertedAfterMs = new Map<string, number>();
  const acceptedAtMs = new Map(accepted.map(({ probe, acceptedMs }) => [probe.requestId, performance.timeOrigin + acceptedMs]));
  let unalerted = 0;
  for (const { probe, acceptedMs } of accepted) {
    for (;;) {
      const at = receiver.acceptedAt.get(probe.decodeEngine);
      if (at !== undefined) {
        alertedAfterMs.set(probe.requestId, at - acceptedMs);
        break;
      }
      if (performance.now() - acceptedMs > options.timeoutMs) {
        unalerted++;
        break;
      }
      await sleep(50);
    }
  }
  return { samplesMs: [...alertedAfterMs.values()], alertedAfterMs, acceptedAtMs, sent: probes.length, unalerted, rejected };
}

/**
 * For each probe whose record was stored, by request id, the time from the collector's 200 to the first flagged record's computed_at
 * (ClickHouse's clock at its INSERT, the same host's): the part of the alert's latency that is the pipeline's and
 * the record refresh's, before the push looks it up.
 */
export async function recordComputedAfterMs(
  client: ClickHouseClient,
  database: string,
  acceptedAtMs: Map<string, number>,
): Promise<Map<string, number>> {
  const rows = await (
    await client.query({
      query:
        'SELECT request_id, toUnixTimestamp64Milli(min(computed_at)) AS computed_ms FROM {db:Identifier}.lifecycle_flags ' +
        'WHERE request_id IN {ids:Array(String)} AND acks_after_failed_send > 0 GROUP BY request_id',
      query_params: { db: database, ids: [...acceptedAtMs.keys()] },
      format: 'JSONEachRow',
    })
  ).json<{ request_id: string; computed_ms: string | number }>();
  return new Map(rows.map((row) => [row.request_id, Number(row.computed_ms) - (acceptedAtMs.get(row.request_id) ?? NaN)]));
}
