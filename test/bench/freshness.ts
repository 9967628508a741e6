import { setTimeout as sleep } from 'node:timers/promises';
import { startOtlpReceiver } from '../support/otlp-sink.ts';
import { encodeOtlpProtobuf, forEachSpan, type OtlpTraceRequest } from '../../contract/index.ts';
import { MAX_LOOKUP_REQUEST_IDS } from '../../dashboards/index.ts';
import { buildScenario, runSimulation, type SimConfig } from '../../emitter/index.ts';
import { formatStringListText } from '../../queries/index.ts';

export interface Workload {
  bodies: { body: Uint8Array; spans: number; probe?: { requestId: string; endNs: bigint } }[];
  spans: number;
}

const REQUEST_ID = 'pd.request.id';

/** ISO 8601 with up to nine fractional digits (as the read API writes DateTime64) to Unix nanoseconds. */
export function isoToNanos(text: string): bigint {
  const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z?$/.exec(text.replace(' ', 'T'));
  if (!match) throw new Error(`not an ISO time: ${text}`);
  return BigInt(Date.parse(`${match[1]}Z`)) * 1_000_000n + BigInt((match[2] ?? '').padEnd(9, '0'));
}

/**
 * The engines' OTLP requests for `seconds` of traffic at `rate` spans/s, captured from the simulator and encoded
 * ahead of time so that replaying them costs the sender almost nothing. Every `probeEvery`-th request carries a
 * probe: a span whose end is later than every earlier span of its request id, so the lifecycle record can only
 * show it (last_seen at or after its end) once that very span is stored.
 */
export async function buildWorkload(options: {
  rate: number;
  seconds: number;
  probeEvery: number;
  idPrefix: string;
  requestIds: NonNullable<SimConfig['requestIds']>;
  startTimeMs: number;
}): Promise<Workload> {
  const captured: OtlpTraceRequest[] = [];
  const receiver = await startOtlpReceiver({ port: 0, host: '127.0.0.1', onRequest: (request) => void captured.push(request) });
  try {
    const { config } = buildScenario('mixed', 17);
    config.requests = Math.max(1, Math.round((options.rate * options.seconds) / 16.4));
    config.durationMs = Number.MAX_SAFE_INTEGER;
    config.idPrefix = options.idPrefix;
    config.requestIds = options.requestIds;
    await runSimulation({
      config,
      endpoint: receiver.url,
      startTimeMs: options.startTimeMs,
      pace: 'fast',
      batchSize: 256,
      keepTruth: false,
    });
  } finally {
    await receiver.close();
  }
  const latestEnd = new Map<string, bigint>();
  let spans = 0;
  const bodies = captured.map((request, index) => {
    let count = 0;
    let probe: { requestId: string; endNs: bigint } | undefined;
    forEachSpan(request, (span) => {
      count++;
      const id = span.attributes[REQUEST_ID];
      if (typeof id !== 'string') return;
      const before = latestEnd.get(id) ?? -1n;
      if (!probe && index % options.probeEvery === 0 && span.endTimeUnixNano > before)
        probe = { requestId: id, endNs: span.endTimeUnixNano };
      if (span.endTimeUnixNano > before) latestEnd.set(id, span.endTimeUnixNano);
    });
    spans += count;
    return { body: encodeOtlpProtobuf(request), spans: count, probe };
  });
  return { bodies, spans };
}

export interface FreshnessResult {
  offeredSpansPerSecond: number;
  samplesMs: number[];
  rejected: number;
  unseen: number;
}

/**
 * Replays the workload into the collector at a fixed rate (each request at its scheduled time, whether or not the
 * previous ones were answered) and measures, for each probe, the time from the start of its export to the moment
 * the read API shows its lifecycle with the probe's span in it. One poller asks for every probe not yet seen in one
 * read each `pollMs`, of the lifecycles' progress only (lifecycle_progress_by_requests): the measurement must not be
 * a large load on what it measures. Asking per probe (a dozen reads every 100 ms, each planning the lifecycles view
 * for tens of ms) made it the largest reader of ClickHouse at 20,000 spans/s, and asking for whole records (their
 * page lists included) kept the read API, which shares this process with the sender and the collector, busy enough
 * to delay the collector's answers by hundreds of ms.
 */
export async function measureFreshness(options: {
  workload: Workload;
  rate: number;
  collectorUrl: string;
  readApiUrl: string;
  pollMs: number;
  timeoutMs: number;
  onProgress?: (sent: number, samples: number) => void;
}): Promise<FreshnessResult> {
  const { workload, rate, collectorUrl, readApiUrl } = options;
  const samplesMs: number[] = [];
  let rejected = 0;
  let unseen = 0;
  const inFlight: Promise<void>[] = [];
  // Engines bound their exports in flight too: past this many unanswered requests the sender waits, and the
  // offered load reported is what the stack actually took rather than the target.
  let sending = 0;
  const maxSending = 64;
  /** Probes exported and not yet seen, by request id (a request may have several in flight). */
  const waiting = new Map<string, { endNs: bigint; exportedAt: number }[]>();
  let sendingDone = false;
  /** The latest last_seen the read API shows for each id (none for an id without a lifecycle, or a failed read). */
  const lastSeenOf = async (ids: string[]): Promise<Map<string, bigint>> => {
    const lastSeen = new Map<string, bigint>();
    const res = await fetch(
      `${readApiUrl}/api/queries/lifecycle_progress_by_requests?request_ids=${encodeURIComponent(formatStringListText(ids))}`,
    ).catch(() => undefined);
    if (!res?.ok) {
      await res?.arrayBuffer();
      return lastSeen;
    }
    for (const l of ((await res.json()) as { rows: { request_id: string; last_seen: string }[] }).rows) {
      const seen = isoToNanos(l.last_seen);
      if (seen > (lastSeen.get(l.request_id) ?? -1n)) lastSeen.set(l.request_id, seen);
    }
    return lastSeen;
  };
  const checkWaiting = async () => {
    const lastSeen = await lastSeenOf([...waiting.keys()].slice(0, MAX_LOOKUP_REQUEST_IDS));
    const now = performance.now();
    for (const [id, probes] of waiting) {
      const left = probes.filter((probe) => {
        if ((lastSeen.get(id) ?? -1n) >= probe.endNs) samplesMs.push(now - probe.exportedAt);
        else if (now - probe.exportedAt > options.timeoutMs) unseen++;
        else return true;
        return false;
      });
      if (left.length > 0) waiting.set(id, left);
      else waiting.delete(id);
    }
  };
  const poller = (async () => {
    while (!sendingDone || waiting.size > 0) {
      if (waiting.size > 0) await checkWaiting();
      await sleep(options.pollMs);
    }
  })();
  const started = performance.now();
  let scheduledSpans = 0;
  let sent = 0;
  for (const item of workload.bodies) {
    const due = started + (scheduledSpans / rate) * 1000;
    scheduledSpans += item.spans;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    while (sending >= maxSending) await sleep(5);
    const exportedAt = performance.now();
    sending++;
    inFlight.push(
      (async () => {
        for (;;) {
          const res = await fetch(`${collectorUrl}/v1/traces`, {
            method: 'POST',
            headers: { 'content-type': 'application/x-protobuf' },
            body: item.body,
          }).catch(() => undefined);
          await res?.arrayBuffer();
          if (res?.ok) break;
          rejected++;
          await sleep(Number(res?.headers.get('retry-after') ?? 1) * 1000);
        }
        sending--;
        sent += item.spans;
        options.onProgress?.(sent, samplesMs.length);
        if (item.probe)
          waiting.set(item.probe.requestId, [...(waiting.get(item.probe.requestId) ?? []), { endNs: item.probe.endNs, exportedAt }]);
      })(),
    );
  }
  const offeredSeconds = (performance.now() - started) / 1000;
  await Promise.all(inFlight);
  sendingDone = true;
  await poller;
  return { offeredSpansPerSecond: workload.spans / offeredSeconds, samplesMs, rejected, unseen };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}
