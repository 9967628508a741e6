/**
 * The SGLang PR 35049 trace (mode OFF) as engines instrumented with holdscope's emitter send it over OTLP: request A
 * is force-released while prefill still writes its pages 14..44, and request B is given pages 1..32 30 ms later, so
 * that A's write lands on B's pages 14..32. Shared by the test of the detection on one node and the cluster run.
 */
import assert from 'node:assert/strict';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { createPdEmitter } from '../../emitter/index.ts';
import type { Flag } from '../../queries/index.ts';

export const PR35049_SPANS = 4;

const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

/**
 * Sends the trace to the collector at `collectorUrl`, its first span at about `startMs` (by default an hour ago);
 * `prefix` sets the requests' ids (`${prefix}-A`, `${prefix}-B`). Resolves when the collector accepted every span.
 */
export async function sendPr35049Trace(collectorUrl: string, prefix = 'room', startMs = Date.now() - 3_600_000): Promise<void> {
  const exporter = new OTLPTraceExporter({ url: `${collectorUrl}/v1/traces` });
  const engine = (attrs: Record<string, string | number>) =>
    new TracerProvider({
      resource: resourceFromAttributes({ 'pd.engine.version': 'sglang-pr35049-off', 'pd.transfer.backend': 'mooncake', ...attrs }),
      spanProcessors: [new SimpleSpanProcessor({ exporter })],
    });
  const decodeProvider = engine({ 'pd.role': 'decode', 'pd.engine.id': 'decode-0', 'pd.kv.capacity_slots': 65536 });
  const prefillProvider = engine({ 'pd.role': 'prefill', 'pd.engine.id': 'prefill-0' });
  const decode = createPdEmitter(decodeProvider.getTracer('decode'));
  const prefill = createPdEmitter(prefillProvider.getTracer('prefill'));
  // The trace's clock is seconds since engine start: 878.7 s is `startMs`.
  const at = (s: number) => startMs + (s - 878.7) * 1000;
  const A = { requestId: `${prefix}-A`, generation: 0 };
  const B = { requestId: `${prefix}-B`, generation: 0 };
  decode.kvAllocated(A, { pages: range(14, 44), slots: 31 * 16 }, { time: at(878.7) });
  prefill.transferChunk(
    A,
    { rank: 0, chunkIndex: 0, pages: range(14, 44), status: 'ok', bytes: 31 * 327_680, decodeEngineId: 'decode-0' },
    { start: at(878.8), end: at(884.8) },
  );
  decode.released(A, { reason: 'forced', pages: range(14, 44) }, { time: at(881.28) });
  decode.kvAllocated(B, { pages: range(1, 32), slots: 32 * 16 }, { time: at(881.31) });
  await Promise.all([decodeProvider.forceFlush(), prefillProvider.forceFlush()]);
  await Promise.all([decodeProvider.shutdown(), prefillProvider.shutdown()]);
}

/** The one late write of the trace: A's, critical, naming B as the owner of pages 14..32. */
export function assertPr35049LateWrite(flags: readonly Flag[], prefix = 'room'): void {
  const late = flags.filter((f) => f.kind === 'late_write' && f.request_id?.startsWith(`${prefix}-`));
  assert.equal(late.length, 1, `one late write in the PR 35049 trace: ${JSON.stringify(late)}`);
  assert.equal(late[0]?.request_id, `${prefix}-A`);
  assert.equal(late[0]?.severity, 'critical');
  assert.deepEqual(late[0]?.evidence.victims, [{ request_id: `${prefix}-B`, generation: 0, pages: range(14, 32) }]);
  assert.match(late[0]?.summary ?? '', new RegExp(`${prefix}-B/0`));
}
