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

/** Who writes late, onto whose pages, between which engines: every name here is span text that reaches a page. */
export interface LateWriteOf {
  requestId: string;
  /** Allocates pages 1-32 after the writer's release (the late write then lands on its pages); none when absent. */
  victimId?: string;
  decodeEngine: string;
  prefillEngine: string;
  version: string;
}

/** A late write, through the real emitter and collector: released on a 300 ms timeout, written at 900 ms. */
export async function loadLateWrite(client: ClickHouseClient, database: string, baseMs: number, of: LateWriteOf): Promise<void> {
  const metrics = createPipelineMetrics();
  const writer = createWriter(client, { database, maxBatchRows: 1000, lingerMs: 5 }, metrics, quietLog);
  const queue = new InProcessQueue(writer, { maxPendingSpans: 10_000, timeoutMs: 30_000, metrics, log: quietLog });
  const collector = new Collector(collectorConfigSchema.parse({ port: 0, host: '127.0.0.1' }), { log: quietLog, queue });
  const port = await collector.start();
  try {
    const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
    const engine = (attrs: Record<string, string | number>) =>
      new TracerProvider({
        resource: resourceFromAttributes({ 'pd.engine.version': of.version, 'pd.transfer.backend': 'mooncake', ...attrs }),
        spanProcessors: [new SimpleSpanProcessor({ exporter })],
      });
    const decodeProvider = engine({ 'pd.role': 'decode', 'pd.engine.id': of.decodeEngine, 'pd.kv.capacity_slots': 65536 });
    const prefillProvider = engine({ 'pd.role': 'prefill', 'pd.engine.id': of.prefillEngine });
    const decode = createPdEmitter(decodeProvider.getTracer('decode'));
    const prefill = createPdEmitter(prefillProvider.getTracer('prefill'));
    const at = (ms: number) => baseMs + ms;
    const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
    const A = { requestId: of.requestId, generation: 0 };
    decode.kvAllocated(A, { pages: range(14, 44), slots: 31 * 16 }, { time: at(0) });
    decode.holdStarted(A, { expectedRanks: [0], timeoutMs: 300, slots: 31 * 16, pages: range(14, 44) }, { time: at(50) });
    prefill.transferChunk(
      A,
      { rank: 0, chunkIndex: 0, pages: range(14, 44), status: 'ok', bytes: 31 * 327_680, decodeEngineId: of.decodeEngine },
      { start: at(20), end: at(900) },
    );
    decode.timeoutFired(A, { missingRanks: [0], action: 'release' }, { time: at(350) });
    decode.released(A, { reason: 'timeout', pages: range(14, 44) }, { time: at(351) });
    if (of.victimId)
      decode.kvAllocated({ requestId: of.victimId, generation: 0 }, { pages: range(1, 32), slots: 32 * 16 }, { time: at(400) });
    await Promise.all([decodeProvider.forceFlush(), prefillProvider.forceFlush()]);
    await writer.flush();
  } finally {
    await collector.shutdown();
  }
}

/** A request whose id is markup: its late write lands on a victim's pages. */
export function loadEvilRequest(client: ClickHouseClient, database: string, baseMs: number): Promise<void> {
  return loadLateWrite(client, database, baseMs, {
    requestId: EVIL_ID,
    victimId: EVIL_VICTIM,
    decodeEngine: 'decode-evil',
    prefillEngine: 'prefill-evil',
    version: 'evil-1',
  });
}
