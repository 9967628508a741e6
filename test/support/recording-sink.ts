import type { PdEmitter, RequestRef, SimSink } from '../../emitter/index.ts';

/** One call the model made on an engine's emitter, with times in simulated microseconds. */
export interface RecordedSpan {
  engineId: string;
  method: keyof PdEmitter;
  req: RequestRef;
  attrs: Record<string, unknown>;
  startUs: number;
  endUs: number;
}

/**
 * A sink that records the model's emitter calls instead of creating OpenTelemetry spans, for tests of the
 * model's behaviour that need no exporter. The clock maps microseconds to [us, 0] so times read back exactly.
 */
export function recordingSink(): { sink: SimSink; spans: RecordedSpan[] } {
  const spans: RecordedSpan[] = [];
  const toUs = (t: unknown): number => (t as [number, number])[0];
  const emitterFor = (engineId: string): PdEmitter =>
    new Proxy({} as PdEmitter, {
      get:
        (_target, method: string) =>
        (req: RequestRef, ...rest: unknown[]) => {
          const options = rest[rest.length - 1] as { time?: unknown; start?: unknown; end?: unknown } | undefined;
          const attrs = (rest.length > 1 ? rest[0] : {}) as Record<string, unknown>;
          const startUs = toUs(options?.time ?? options?.start);
          const endUs = toUs(options?.time ?? options?.end);
          spans.push({ engineId, method: method as keyof PdEmitter, req, attrs, startUs, endUs });
        },
    });
  const cache = new Map<string, PdEmitter>();
  return {
    spans,
    sink: {
      emitter: (id) => cache.get(id) ?? (cache.set(id, emitterFor(id)), cache.get(id) as PdEmitter),
      time: (us) => [us, 0],
    },
  };
}
