import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { createPdEmitter } from '../../emitter/index.ts';
import { createPipelineMetrics, createWriter, InProcessQueue } from '../../pipeline/index.ts';
import { quietLog } from './stack.ts';

export const EVIL_ID = '<script>alert(1)</script>';
export const EVIL_VICTIM = '"><img src=x onerror=alert(2)>';

/** A request whose id is markup, through the real emitter and collector: its late write lands on a victim's pages. */
export async function loadEvilRequest(client: ClickHouseClient, database: string, baseMs: number): Promise<void> {
  const metrics = createPipelineMetrics();
  const writer = createWriter(client, { database, maxBatchRows: 1000, lingerMs: 5 }, metrics, quietLog);
  const queue = new InProcessQueue(writer, { maxPendingSpans: 10_000, timeoutMs: 30_000, metrics, log: quietLog });
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  try {
    const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
    const engine = (attrs: Record<string, string | number>) =>
      new TracerProvider({
        resource: resourceFromAttributes({ 'pd.engine.version': 'evil-1', 'pd.transfer.backend': 'mooncake', ...attrs }),
        spanProcessors: [new SimpleSpanProcessor({ exporter })],
      });
    const decodeProvider = engine({ 'pd.role': 'decode', 'pd.engine.id': 'decode-evil', 'pd.kv.capacity_slots': 65536 });
    const prefillProvider = engine({ 'pd.role': 'prefill', 'pd.engine.id': 'prefill-evil' });
    const decode = createPdEmitter(decodeProvider.getTracer('decode'));
    const prefill = createPdEmitter(prefillProvider.getTracer('prefill'));
    const at = (ms: number) => baseMs + ms;
    const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
    const A = { requestId: EVIL_ID, generation: 0 };
    const B = { requestId: EVIL_VICTIM, generation: 0 };
    decode.kvAllocated(A, { pages: range(14, 44), slots: 31 * 16 }, { time: at(0) });
    decode.holdStarted(A, { expectedRanks: [0], timeoutMs: 300, slots: 31 * 16, pages: range(14, 44) }, { time: at(50) });
    prefill.transferChunk(
      A,
      { rank: 0, chunkIndex: 0, pages: range(14, 44), status: 'ok', bytes: 31 * 327_680, decodeEngineId: 'decode-evil' },
      { start: at(20), end: at(900) },
    );
    decode.timeoutFired(A, { missingRanks: [0], action: 'release' }, { time: at(350) });
    decode.released(A, { reason: 'timeout', pages: range(14, 44) }, { time: at(351) });
    decode.kvAllocated(B, { pages: range(1, 32), slots: 32 * 16 }, { time: at(400) });
    await Promise.all([decodeProvider.forceFlush(), prefillProvider.forceFlush()]);
    await writer.flush();
  } finally {
    await collector.shutdown();
  }
}
