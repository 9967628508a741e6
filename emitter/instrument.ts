import { context as apiContext, trace, SpanKind, type Attributes, type Context, type TimeInput, type Tracer } from '@opentelemetry/api';
import {
  Attr,
  type AdmissionOutcome,
  type ChecksumOutcome,
  type ReleaseReason,
  SpanName,
  type TimeoutAction,
  type TransferStatus,
} from '../contract/index.ts';

export const INSTRUMENTATION_NAME = 'holdscope-emitter';
export const INSTRUMENTATION_VERSION = '1.0.0';

/** The request incarnation a span belongs to. */
export interface RequestRef {
  requestId: string;
  generation: number;
}

/** When an instant happened (default: now) and the context to parent it in (default: the active one). */
export interface InstantOptions {
  time?: TimeInput;
  context?: Context;
}

/** An interval span's bounds. `end` defaults to now, for callers that emit as the interval closes. */
export interface IntervalOptions {
  start: TimeInput;
  end?: TimeInput;
  context?: Context;
}

export interface PdEmitter {
  admissionDecided(
    req: RequestRef,
    attrs: { outcome: AdmissionOutcome; reason?: string },
    options?: InstantOptions | IntervalOptions,
  ): void;
  kvAllocated(req: RequestRef, attrs: { pages: number[]; slots: number }, options?: InstantOptions): void;
  transferChunk(
    req: RequestRef,
    attrs: { rank: number; chunkIndex: number; pages: number[]; status: TransferStatus; bytes: number; decodeEngineId: string },
    options: IntervalOptions,
  ): void;
  handoff(req: RequestRef, options?: InstantOptions): void;
  holdStarted(
    req: RequestRef,
    attrs: { expectedRanks: number[]; timeoutMs: number; slots: number; pages: number[] },
    options?: InstantOptions,
  ): void;
  drained(
    req: RequestRef,
    attrs: { rank: number; chunksDropped: number; inflight: number; failedSends: number; ackWithheld: boolean; decodeEngineId: string },
    options: IntervalOptions,
  ): void;
  ackReceived(req: RequestRef, attrs: { rank: number; ackGeneration: number; accepted: boolean }, options?: InstantOptions): void;
  timeoutFired(req: RequestRef, attrs: { missingRanks: number[]; action: TimeoutAction }, options?: InstantOptions): void;
  released(req: RequestRef, attrs: { reason: ReleaseReason; pages: number[] }, options?: InstantOptions): void;
  checksumChecked(req: RequestRef, attrs: { outcome: ChecksumOutcome }, options?: InstantOptions | IntervalOptions): void;
  cancelled(req: RequestRef, attrs: { targets: string[] }, options?: InstantOptions): void;
}

export interface EmitterDefaults {
  /**
   * The parent context of a request's spans when the call gives none (e.g. one trace per lifecycle). It must
   * be sampled: under the SDK's default parent-based sampler an unsampled parent drops the span silently.
   */
  contextFor?: (req: RequestRef) => Context;
}

function isInterval(options: InstantOptions | IntervalOptions | undefined): options is IntervalOptions {
  return options !== undefined && 'start' in options;
}

/**
 * Typed emitters for every contract span, on the OpenTelemetry API: with no SDK registered they cost a
 * no-op span each. Pass a tracer to emit through a specific provider (one per engine resource).
 */
export function createPdEmitter(
  tracer: Tracer = trace.getTracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION),
  defaults: EmitterDefaults = {},
): PdEmitter {
  function emit(name: string, req: RequestRef, attrs: Attributes, options: InstantOptions | IntervalOptions | undefined): void {
    const attributes: Attributes = { [Attr.requestId]: req.requestId, [Attr.generation]: req.generation, ...attrs };
    const ctx = options?.context ?? defaults.contextFor?.(req) ?? apiContext.active();
    if (isInterval(options)) {
      const span = tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: options.start, attributes }, ctx);
      span.end(options.end);
      return;
    }
    // An instant: end equals start, so pin both to one clock reading.
    const time = options?.time ?? Date.now();
    tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: time, attributes }, ctx).end(time);
  }

  return {
    admissionDecided: (req, a, o) =>
      emit(SpanName.admission, req, { [Attr.admissionOutcome]: a.outcome, ...(a.reason ? { [Attr.admissionReason]: a.reason } : {}) }, o),
    kvAllocated: (req, a, o) => emit(SpanName.kvAlloc, req, { [Attr.kvPages]: a.pages, [Attr.kvSlots]: a.slots }, o),
    transferChunk: (req, a, o) =>
      emit(
        SpanName.transfer,
        req,
        {
          [Attr.rank]: a.rank,
          [Attr.chunkIndex]: a.chunkIndex,
          [Attr.kvPages]: a.pages,
          [Attr.transferStatus]: a.status,
          [Attr.transferBytes]: a.bytes,
          [Attr.decodeEngineId]: a.decodeEngineId,
        },
        o,
      ),
    handoff: (req, o) => emit(SpanName.handoff, req, {}, o),
    holdStarted: (req, a, o) =>
      emit(
        SpanName.hold,
        req,
        { [Attr.holdExpectedRanks]: a.expectedRanks, [Attr.holdTimeoutMs]: a.timeoutMs, [Attr.kvSlots]: a.slots, [Attr.kvPages]: a.pages },
        o,
      ),
    drained: (req, a, o) =>
      emit(
        SpanName.drain,
        req,
        {
          [Attr.rank]: a.rank,
          [Attr.drainChunksDropped]: a.chunksDropped,
          [Attr.drainInflight]: a.inflight,
          [Attr.drainFailedSends]: a.failedSends,
          [Attr.drainAckWithheld]: a.ackWithheld,
          [Attr.decodeEngineId]: a.decodeEngineId,
        },
        o,
      ),
    ackReceived: (req, a, o) =>
      emit(SpanName.ack, req, { [Attr.rank]: a.rank, [Attr.ackGeneration]: a.ackGeneration, [Attr.ackAccepted]: a.accepted }, o),
    timeoutFired: (req, a, o) =>
      emit(SpanName.timeout, req, { [Attr.timeoutMissingRanks]: a.missingRanks, [Attr.timeoutAction]: a.action }, o),
    released: (req, a, o) => emit(SpanName.release, req, { [Attr.releaseReason]: a.reason, [Attr.kvPages]: a.pages }, o),
    checksumChecked: (req, a, o) => emit(SpanName.checksum, req, { [Attr.checksumOutcome]: a.outcome }, o),
    cancelled: (req, a, o) => emit(SpanName.cancel, req, { [Attr.cancelTargets]: a.targets }, o),
  };
}
