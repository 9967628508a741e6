import { ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { TracerProvider, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { createPdEmitter, INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, type PdEmitter } from '../instrument.ts';
import type { SimConfig } from './config.ts';
import { lifecycleContext, simClock, simulatedEngines } from './engines.ts';
import { ClusterModel } from './model.ts';
import type { LifecycleTruth } from './truth.ts';

export interface SimulationOptions {
  config: SimConfig;
  /** OTLP/HTTP base URL; spans go to `${endpoint}/v1/traces` as protobuf. */
  endpoint: string;
  /** Sent with every export, e.g. `authorization: Bearer TOKEN` for a collector that requires a token. */
  headers?: Record<string, string>;
  /** Wall-clock time of simulated time zero. */
  startTimeMs: number;
  /** `fast` runs as fast as the endpoint accepts; `realtime` follows the wall clock (live dashboards). */
  pace: 'fast' | 'realtime';
  /** Spans per OTLP request. */
  batchSize?: number;
  /** Keep per-lifecycle truth (memory grows with the run; off for endless live runs). */
  keepTruth?: boolean;
  /** Replaces the OTLP exporter, e.g. by an in-memory one in tests of the model's spans. */
  exporterFor?: (engineId: string) => SpanExporter;
  signal?: AbortSignal;
  onProgress?: (progress: { simulatedMs: number; spansEmitted: number; spansExported: number; spansFailed: number }) => void;
}

export interface SimulationSummary {
  lifecycles: number;
  spansEmitted: number;
  spansExported: number;
  spansFailed: number;
  exportsFailed: number;
  simulatedMs: number;
  truth: LifecycleTruth[];
}

/** Collects ended spans so the run decides when to export: a full buffer pauses the model, nothing is dropped. */
class CollectingProcessor implements SpanProcessor {
  readonly pending: ReadableSpan[] = [];
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    this.pending.push(span);
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

interface EngineChannel {
  provider: TracerProvider;
  processor: CollectingProcessor;
  exporter: SpanExporter;
  emitter: PdEmitter;
}

function exportBatch(exporter: SpanExporter, spans: ReadableSpan[]): Promise<boolean> {
  return new Promise((resolve) => exporter.export(spans, (result) => resolve(result.code === ExportResultCode.SUCCESS)));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs the cluster model and exports its spans through the OpenTelemetry SDK, one tracer provider (one
 * resource) per simulated engine, as a real deployment of engines would.
 */
// eslint-disable-next-line max-lines-per-function -- the simulation loop with its export back-pressure, read top to bottom
export async function runSimulation(options: SimulationOptions): Promise<SimulationSummary> {
  const { config } = options;
  const batchSize = options.batchSize ?? 2000;
  const channels = new Map<string, EngineChannel>();
  for (const engine of simulatedEngines(config)) {
    const processor = new CollectingProcessor();
    const provider = new TracerProvider({ resource: engine.resource, spanProcessors: [processor] });
    const exporter =
      options.exporterFor?.(engine.id) ??
      new OTLPTraceExporter({ url: `${options.endpoint.replace(/\/$/, '')}/v1/traces`, headers: options.headers });
    const tracer = provider.getTracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION);
    const emitter = createPdEmitter(tracer, { contextFor: (req) => lifecycleContext(config.cluster, req) });
    channels.set(engine.id, { provider, processor, exporter, emitter });
  }
  const model = new ClusterModel(
    config,
    {
      emitter: (engineId) => {
        const channel = channels.get(engineId);
        if (!channel) throw new Error(`simulated span from unknown engine ${engineId}`);
        return channel.emitter;
      },
      time: simClock(options.startTimeMs),
    },
    { keepTruth: options.keepTruth ?? true },
  );

  let spansExported = 0;
  let spansFailed = 0;
  let exportsFailed = 0;
  const pendingCount = () => [...channels.values()].reduce((n, c) => n + c.processor.pending.length, 0);

  async function flush(all: boolean): Promise<void> {
    await Promise.all(
      [...channels.values()].map(async (channel) => {
        const queue = channel.processor.pending;
        while (queue.length >= (all ? 1 : batchSize)) {
          const batch = queue.splice(0, batchSize);
          if (await exportBatch(channel.exporter, batch)) spansExported += batch.length;
          else {
            exportsFailed++;
            spansFailed += batch.length;
          }
        }
      }),
    );
  }

  const progress = () => options.onProgress?.({ simulatedMs: model.now / 1000, spansEmitted: model.spans, spansExported, spansFailed });
  const stepUs = 100_000;
  const wallStart = Date.now();
  let lastProgress = 0;
  let more = true;
  let cursor = 0;
  while (more && !options.signal?.aborted) {
    if (options.pace === 'realtime') {
      const targetUs = (Date.now() - wallStart) * 1000;
      more = model.runUntil(targetUs);
      await flush(true);
      const nextUs = model.nextEventUs();
      if (nextUs !== undefined && nextUs > targetUs) await sleep(Math.min(250, Math.max(10, (nextUs - targetUs) / 1000)));
    } else {
      // Jump over idle stretches (a 30 s hold timeout with nothing else to do) instead of stepping through them.
      cursor = Math.max(cursor + stepUs, model.nextEventUs() ?? cursor);
      more = model.runUntil(cursor);
      if (pendingCount() >= batchSize) await flush(false);
    }
    if (Date.now() - lastProgress > 500) {
      lastProgress = Date.now();
      progress();
    }
  }
  await flush(true);
  progress();
  await Promise.all([...channels.values()].map((c) => c.exporter.shutdown()));
  const truth = model.truth();
  return {
    lifecycles: truth.length,
    spansEmitted: model.spans,
    spansExported,
    spansFailed,
    exportsFailed,
    simulatedMs: model.now / 1000,
    truth,
  };
}
