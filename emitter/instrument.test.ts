import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import {
  type AttributeValue,
  type Attributes,
  type Context,
  type HrTime,
  ProxyTracer,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { Attr, EMITTED_BY, ResourceAttr, type Role, SPAN_NAMES, SpanName } from '../contract/names.ts';
import type { AttrMap, AttrValue, OtlpSpan } from '../contract/otlp-model.ts';
import { validateSpan } from '../contract/validate.ts';
import { createPdEmitter, type EmitterDefaults, type PdEmitter, type RequestRef } from './instrument.ts';

// ---------------------------------------------------------------------------------------------------------
// An SDK pipeline per engine role, and the conversion of a finished span into what the validator reads.
// ---------------------------------------------------------------------------------------------------------

const RESOURCES: Record<Role, AttrMap> = {
  router: {
    [ResourceAttr.serviceName]: 'router',
    [ResourceAttr.role]: 'router',
    [ResourceAttr.engineId]: 'router-0',
    [ResourceAttr.engineVersion]: 'r-1.2',
  },
  prefill: {
    [ResourceAttr.serviceName]: 'sglang-prefill',
    [ResourceAttr.role]: 'prefill',
    [ResourceAttr.engineId]: 'prefill-0',
    [ResourceAttr.engineVersion]: 'sglang-0.5.3',
    [ResourceAttr.transferBackend]: 'mooncake',
    [ResourceAttr.cluster]: 'us-east-1a',
  },
  decode: {
    [ResourceAttr.serviceName]: 'sglang-decode',
    [ResourceAttr.role]: 'decode',
    [ResourceAttr.engineId]: 'decode-0',
    [ResourceAttr.engineVersion]: 'sglang-0.5.3',
    [ResourceAttr.transferBackend]: 'mooncake',
    [ResourceAttr.cluster]: 'us-east-1a',
    [ResourceAttr.kvCapacitySlots]: 524_288,
  },
};

interface Pipeline {
  exporter: InMemorySpanExporter;
  provider: TracerProvider;
  emitter: PdEmitter;
  /** The one span emitted since the last call; fails if there is not exactly one. */
  only(): ReadableSpan;
}

const providers: TracerProvider[] = [];
after(async () => {
  for (const provider of providers) await provider.shutdown();
});

function pipeline(role: Role, defaults?: EmitterDefaults): Pipeline {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({
    resource: resourceFromAttributes(RESOURCES[role] as Attributes),
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  });
  providers.push(provider);
  const emitter = createPdEmitter(provider.getTracer('t'), defaults);
  return {
    exporter,
    provider,
    emitter,
    only() {
      const spans = exporter.getFinishedSpans();
      assert.equal(spans.length, 1, `expected exactly one finished span, got ${spans.length}`);
      exporter.reset();
      return spans[0]!;
    },
  };
}

const hrToNs = (t: HrTime): bigint => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);

function toAttrValue(value: AttributeValue): AttrValue {
  return Array.isArray(value) ? value.map((item) => (item === undefined ? null : (item as AttrValue))) : value;
}

function toAttrMap(attributes: Attributes): AttrMap {
  const out: AttrMap = {};
  for (const [key, value] of Object.entries(attributes)) if (value !== undefined) out[key] = toAttrValue(value);
  return out;
}

/** What an OTLP exporter would send for this span, in the model the validator reads. */
function toOtlp(span: ReadableSpan): { span: OtlpSpan; resource: AttrMap } {
  const ctx = span.spanContext();
  return {
    span: {
      traceId: ctx.traceId,
      spanId: ctx.spanId,
      parentSpanId: span.parentSpanContext?.spanId ?? '',
      name: span.name,
      kind: span.kind + 1, // OTLP numbers kinds from SPAN_KIND_INTERNAL = 1
      startTimeUnixNano: hrToNs(span.startTime),
      endTimeUnixNano: hrToNs(span.endTime),
      attributes: toAttrMap(span.attributes),
      statusCode: span.status.code,
      statusMessage: span.status.message ?? '',
    },
    resource: toAttrMap(span.resource.attributes),
  };
}

function validated(span: ReadableSpan) {
  const { span: otlp, resource } = toOtlp(span);
  const result = validateSpan(otlp, resource);
  if (result.status !== 'valid') assert.fail(`validator: ${JSON.stringify(result)}`);
  return result.event;
}

// ---------------------------------------------------------------------------------------------------------
// Every emitter function
// ---------------------------------------------------------------------------------------------------------

const REQ: RequestRef = { requestId: 'room-81723', generation: 3 };
const START: HrTime = [1_700_000_000, 123_456_789];
const END: HrTime = [1_700_000_002, 987_654_321];
const START_NS = 1_700_000_000_123_456_789n;
const END_NS = 1_700_000_002_987_654_321n;

interface EmitCase {
  title: string;
  fn: keyof PdEmitter;
  name: SpanName;
  role: Role;
  interval: boolean;
  emit: (e: PdEmitter) => void;
  /** The span's own contract attributes, besides request id and generation. */
  attrs: Attributes;
  /** The typed event fields the validator must derive from them. */
  fields: Record<string, unknown>;
}

const CASES: EmitCase[] = [
  {
    title: 'admissionDecided (instant, with reason)',
    fn: 'admissionDecided',
    name: SpanName.admission,
    role: 'router',
    interval: false,
    emit: (e) => e.admissionDecided(REQ, { outcome: 'rejected', reason: 'kv_capacity' }, { time: START }),
    attrs: { [Attr.admissionOutcome]: 'rejected', [Attr.admissionReason]: 'kv_capacity' },
    fields: { outcome: 'rejected', reason: 'kv_capacity' },
  },
  {
    title: 'admissionDecided (instant, no reason, from decode)',
    fn: 'admissionDecided',
    name: SpanName.admission,
    role: 'decode',
    interval: false,
    emit: (e) => e.admissionDecided(REQ, { outcome: 'accepted' }, { time: START }),
    attrs: { [Attr.admissionOutcome]: 'accepted' },
    fields: { outcome: 'accepted', reason: '' },
  },
  {
    title: 'admissionDecided (empty reason is omitted, not sent as an invalid "")',
    fn: 'admissionDecided',
    name: SpanName.admission,
    role: 'router',
    interval: false,
    emit: (e) => e.admissionDecided(REQ, { outcome: 'accepted', reason: '' }, { time: START }),
    attrs: { [Attr.admissionOutcome]: 'accepted' },
    fields: { outcome: 'accepted', reason: '' },
  },
  {
    title: 'admissionDecided (interval)',
    fn: 'admissionDecided',
    name: SpanName.admission,
    role: 'router',
    interval: true,
    emit: (e) => e.admissionDecided(REQ, { outcome: 'accepted', reason: 'fits' }, { start: START, end: END }),
    attrs: { [Attr.admissionOutcome]: 'accepted', [Attr.admissionReason]: 'fits' },
    fields: { outcome: 'accepted', reason: 'fits' },
  },
  {
    title: 'kvAllocated',
    fn: 'kvAllocated',
    name: SpanName.kvAlloc,
    role: 'decode',
    interval: false,
    emit: (e) => e.kvAllocated(REQ, { pages: [14, 15, 16], slots: 48 }, { time: START }),
    attrs: { [Attr.kvPages]: [14, 15, 16], [Attr.kvSlots]: 48 },
    fields: { pages: [14, 15, 16], slots: 48 },
  },
  {
    title: 'transferChunk',
    fn: 'transferChunk',
    name: SpanName.transfer,
    role: 'prefill',
    interval: true,
    emit: (e) =>
      e.transferChunk(
        REQ,
        { rank: 1, chunkIndex: 4, pages: [30, 31, 32, 33], status: 'timeout', bytes: 1_179_648, decodeEngineId: 'decode-0' },
        { start: START, end: END },
      ),
    attrs: {
      [Attr.rank]: 1,
      [Attr.chunkIndex]: 4,
      [Attr.kvPages]: [30, 31, 32, 33],
      [Attr.transferStatus]: 'timeout',
      [Attr.transferBytes]: 1_179_648,
      [Attr.decodeEngineId]: 'decode-0',
    },
    fields: { rank: 1, chunkIndex: 4, pages: [30, 31, 32, 33], status: 'timeout', bytes: 1_179_648, decodeEngineId: 'decode-0' },
  },
  {
    title: 'handoff',
    fn: 'handoff',
    name: SpanName.handoff,
    role: 'decode',
    interval: false,
    emit: (e) => e.handoff(REQ, { time: START }),
    attrs: {},
    fields: {},
  },
  {
    title: 'holdStarted',
    fn: 'holdStarted',
    name: SpanName.hold,
    role: 'decode',
    interval: false,
    emit: (e) => e.holdStarted(REQ, { expectedRanks: [0, 1], timeoutMs: 30_000, slots: 496, pages: [14, 15, 44] }, { time: START }),
    attrs: { [Attr.holdExpectedRanks]: [0, 1], [Attr.holdTimeoutMs]: 30_000, [Attr.kvSlots]: 496, [Attr.kvPages]: [14, 15, 44] },
    fields: { expectedRanks: [0, 1], timeoutMs: 30_000, slots: 496, pages: [14, 15, 44] },
  },
  {
    title: 'drained',
    fn: 'drained',
    name: SpanName.drain,
    role: 'prefill',
    interval: true,
    emit: (e) =>
      e.drained(
        REQ,
        { rank: 1, chunksDropped: 2, inflight: 3, failedSends: 1, ackWithheld: true, decodeEngineId: 'decode-0' },
        { start: START, end: END },
      ),
    attrs: {
      [Attr.rank]: 1,
      [Attr.drainChunksDropped]: 2,
      [Attr.drainInflight]: 3,
      [Attr.drainFailedSends]: 1,
      [Attr.drainAckWithheld]: true,
      [Attr.decodeEngineId]: 'decode-0',
    },
    fields: { rank: 1, chunksDropped: 2, inflight: 3, failedSends: 1, ackWithheld: true, decodeEngineId: 'decode-0' },
  },
  {
    title: 'drained (ackWithheld false is kept, not dropped)',
    fn: 'drained',
    name: SpanName.drain,
    role: 'prefill',
    interval: true,
    emit: (e) =>
      e.drained(
        REQ,
        { rank: 0, chunksDropped: 0, inflight: 0, failedSends: 0, ackWithheld: false, decodeEngineId: 'decode-0' },
        { start: START, end: END },
      ),
    attrs: {
      [Attr.rank]: 0,
      [Attr.drainChunksDropped]: 0,
      [Attr.drainInflight]: 0,
      [Attr.drainFailedSends]: 0,
      [Attr.drainAckWithheld]: false,
      [Attr.decodeEngineId]: 'decode-0',
    },
    fields: { rank: 0, chunksDropped: 0, inflight: 0, failedSends: 0, ackWithheld: false, decodeEngineId: 'decode-0' },
  },
  {
    title: 'ackReceived',
    fn: 'ackReceived',
    name: SpanName.ack,
    role: 'decode',
    interval: false,
    emit: (e) => e.ackReceived(REQ, { rank: 1, ackGeneration: 2, accepted: false }, { time: START }),
    attrs: { [Attr.rank]: 1, [Attr.ackGeneration]: 2, [Attr.ackAccepted]: false },
    fields: { rank: 1, ackGeneration: 2, accepted: false },
  },
  {
    title: 'timeoutFired',
    fn: 'timeoutFired',
    name: SpanName.timeout,
    role: 'decode',
    interval: false,
    emit: (e) => e.timeoutFired(REQ, { missingRanks: [1], action: 'quarantine' }, { time: START }),
    attrs: { [Attr.timeoutMissingRanks]: [1], [Attr.timeoutAction]: 'quarantine' },
    fields: { missingRanks: [1], action: 'quarantine' },
  },
  {
    title: 'released',
    fn: 'released',
    name: SpanName.release,
    role: 'decode',
    interval: false,
    emit: (e) => e.released(REQ, { reason: 'timeout', pages: [14, 15, 44] }, { time: START }),
    attrs: { [Attr.releaseReason]: 'timeout', [Attr.kvPages]: [14, 15, 44] },
    fields: { reason: 'timeout', pages: [14, 15, 44] },
  },
  {
    title: 'checksumChecked (instant)',
    fn: 'checksumChecked',
    name: SpanName.checksum,
    role: 'decode',
    interval: false,
    emit: (e) => e.checksumChecked(REQ, { outcome: 'mismatch' }, { time: START }),
    attrs: { [Attr.checksumOutcome]: 'mismatch' },
    fields: { outcome: 'mismatch' },
  },
  {
    title: 'checksumChecked (interval)',
    fn: 'checksumChecked',
    name: SpanName.checksum,
    role: 'decode',
    interval: true,
    emit: (e) => e.checksumChecked(REQ, { outcome: 'ok' }, { start: START, end: END }),
    attrs: { [Attr.checksumOutcome]: 'ok' },
    fields: { outcome: 'ok' },
  },
  {
    title: 'cancelled',
    fn: 'cancelled',
    name: SpanName.cancel,
    role: 'router',
    interval: false,
    emit: (e) => e.cancelled(REQ, { targets: ['prefill-0', 'decode-0'] }, { time: START }),
    attrs: { [Attr.cancelTargets]: ['prefill-0', 'decode-0'] },
    fields: { targets: ['prefill-0', 'decode-0'] },
  },
];

const EMITTER_FUNCTIONS: Array<keyof PdEmitter> = [
  'admissionDecided',
  'kvAllocated',
  'transferChunk',
  'handoff',
  'holdStarted',
  'drained',
  'ackReceived',
  'timeoutFired',
  'released',
  'checksumChecked',
  'cancelled',
];

describe('createPdEmitter: every function emits its contract span', () => {
  it('the cases cover every emitter function and every span name', () => {
    const emitter = createPdEmitter(new TracerProvider().getTracer('t'));
    assert.deepEqual(Object.keys(emitter).sort(), [...EMITTER_FUNCTIONS].sort());
    assert.deepEqual([...new Set(CASES.map((c) => c.fn))].sort(), [...EMITTER_FUNCTIONS].sort());
    assert.deepEqual([...new Set(CASES.map((c) => c.name))].sort(), [...SPAN_NAMES].sort());
    for (const c of CASES) assert.ok(EMITTED_BY[c.name].includes(c.role), `${c.title}: ${c.role} may emit ${c.name}`);
  });

  for (const c of CASES) {
    it(c.title, () => {
      const p = pipeline(c.role);
      c.emit(p.emitter);
      const span = p.only();

      assert.equal(span.name, c.name);
      assert.equal(span.kind, SpanKind.INTERNAL);
      assert.equal(span.ended, true);
      assert.deepEqual({ ...span.attributes }, { [Attr.requestId]: REQ.requestId, [Attr.generation]: REQ.generation, ...c.attrs });
      assert.equal(span.droppedAttributesCount, 0);
      assert.deepEqual(span.startTime, START);
      assert.deepEqual(span.endTime, c.interval ? END : START);
      assert.equal(span.parentSpanContext, undefined, 'no context given: a root span');

      // The strongest check: what the SDK exports passes the real validator, with the same values.
      const event = validated(span);
      const { traceId, spanId } = span.spanContext();
      assert.deepEqual(event, {
        name: c.name,
        cluster: c.role === 'router' ? 'default' : 'us-east-1a',
        requestId: REQ.requestId,
        generation: REQ.generation,
        contractVersion: 1,
        engine: {
          role: c.role,
          id: RESOURCES[c.role][ResourceAttr.engineId],
          version: RESOURCES[c.role][ResourceAttr.engineVersion],
          backend: c.role === 'router' ? '' : 'mooncake',
          capacitySlots: c.role === 'decode' ? 524_288 : 0,
          experimentArm: '',
          experimentRun: '',
        },
        traceId,
        spanId,
        startNs: START_NS,
        endNs: c.interval ? END_NS : START_NS,
        ...c.fields,
      });
    });
  }

  it('generation 0 is emitted as 0, not dropped', () => {
    const p = pipeline('decode');
    p.emitter.handoff({ requestId: 'r', generation: 0 }, { time: START });
    const span = p.only();
    assert.deepEqual({ ...span.attributes }, { [Attr.requestId]: 'r', [Attr.generation]: 0 });
    assert.equal(validated(span).generation, 0);
  });

  it('two requests on one emitter each keep their own id and generation', () => {
    const p = pipeline('decode');
    p.emitter.handoff({ requestId: 'a', generation: 1 }, { time: START });
    p.emitter.handoff({ requestId: 'b', generation: 2 }, { time: START });
    const spans = p.exporter.getFinishedSpans();
    assert.deepEqual(
      spans.map((s) => [s.attributes[Attr.requestId], s.attributes[Attr.generation]]),
      [
        ['a', 1],
        ['b', 2],
      ],
    );
  });

  it('an instant without a time is stamped now, with end equal to start', () => {
    const p = pipeline('decode');
    const before = BigInt(Date.now()) * 1_000_000n;
    p.emitter.handoff(REQ);
    const after = BigInt(Date.now()) * 1_000_000n;
    const span = p.only();
    assert.deepEqual(span.endTime, span.startTime);
    const event = validated(span);
    assert.ok(event.startNs >= before && event.startNs <= after, `${event.startNs} within [${before}, ${after}]`);
  });

  it('an instant accepts a Date and an epoch-millisecond number', () => {
    const p = pipeline('decode');
    p.emitter.handoff(REQ, { time: new Date(1_700_000_000_123) });
    assert.deepEqual(p.only().startTime, [1_700_000_000, 123_000_000]);
    p.emitter.handoff(REQ, { time: 1_700_000_000_456 });
    const span = p.only();
    assert.deepEqual(span.startTime, [1_700_000_000, 456_000_000]);
    assert.deepEqual(span.endTime, span.startTime);
  });

  it('an interval without an end ends now', () => {
    const p = pipeline('prefill');
    const start: HrTime = [Math.floor(Date.now() / 1000) - 5, 0];
    p.emitter.transferChunk(REQ, { rank: 0, chunkIndex: 0, pages: [1], status: 'ok', bytes: 10, decodeEngineId: 'decode-0' }, { start });
    const now = BigInt(Date.now()) * 1_000_000n;
    const span = p.only();
    assert.deepEqual(span.startTime, start);
    const event = validated(span);
    assert.ok(event.endNs > event.startNs && event.endNs <= now);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Parent context
// ---------------------------------------------------------------------------------------------------------

function parentContext(traceId: string, spanId: string): Context {
  return trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
}

describe('createPdEmitter: parent context', () => {
  const LIFECYCLE_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
  const LIFECYCLE_SPAN = '00f067aa0ba902b7';
  const EXPLICIT_TRACE = 'a3ce929d0e0e47364bf92f3577b34da6';
  const EXPLICIT_SPAN = 'b7ad6b7169203331';

  it('defaults.contextFor sets the parent of every span, and is given the request', () => {
    const seen: RequestRef[] = [];
    const p = pipeline('decode', {
      contextFor: (req) => {
        seen.push(req);
        return parentContext(LIFECYCLE_TRACE, LIFECYCLE_SPAN);
      },
    });
    p.emitter.holdStarted(REQ, { expectedRanks: [0], timeoutMs: 1, slots: 1, pages: [1] }, { time: START });
    const span = p.only();
    assert.equal(span.spanContext().traceId, LIFECYCLE_TRACE);
    assert.notEqual(span.spanContext().spanId, LIFECYCLE_SPAN);
    assert.equal(span.parentSpanContext?.traceId, LIFECYCLE_TRACE);
    assert.equal(span.parentSpanContext?.spanId, LIFECYCLE_SPAN);
    assert.deepEqual(seen, [REQ]);
    const { span: otlp } = toOtlp(span);
    assert.equal(otlp.parentSpanId, LIFECYCLE_SPAN);
    assert.equal(validated(span).traceId, LIFECYCLE_TRACE);
  });

  it('an explicit options.context wins over defaults.contextFor (instant and interval)', () => {
    const p = pipeline('prefill', { contextFor: () => parentContext(LIFECYCLE_TRACE, LIFECYCLE_SPAN) });
    const explicit = parentContext(EXPLICIT_TRACE, EXPLICIT_SPAN);
    p.emitter.drained(
      REQ,
      { rank: 0, chunksDropped: 0, inflight: 0, failedSends: 0, ackWithheld: false, decodeEngineId: 'decode-0' },
      { start: START, end: END, context: explicit },
    );
    const interval = p.only();
    assert.equal(interval.spanContext().traceId, EXPLICIT_TRACE);
    assert.equal(interval.parentSpanContext?.spanId, EXPLICIT_SPAN);

    const d = pipeline('decode', { contextFor: () => parentContext(LIFECYCLE_TRACE, LIFECYCLE_SPAN) });
    d.emitter.released(REQ, { reason: 'drained', pages: [1] }, { time: START, context: explicit });
    const instant = d.only();
    assert.equal(instant.spanContext().traceId, EXPLICIT_TRACE);
    assert.equal(instant.parentSpanContext?.spanId, EXPLICIT_SPAN);
    assert.equal(validated(instant).name, 'pd.release');
  });

  it('an explicit options.context without any defaults parents the span', () => {
    const p = pipeline('router');
    p.emitter.cancelled(REQ, { targets: ['decode-0'] }, { context: parentContext(EXPLICIT_TRACE, EXPLICIT_SPAN), time: START });
    const span = p.only();
    assert.equal(span.spanContext().traceId, EXPLICIT_TRACE);
    assert.equal(span.parentSpanContext?.spanId, EXPLICIT_SPAN);
  });
});

// ---------------------------------------------------------------------------------------------------------
// No SDK registered: the global API tracer is a no-op
// ---------------------------------------------------------------------------------------------------------

describe('createPdEmitter: with no SDK registered', () => {
  it('createPdEmitter() emits every span without throwing and records nothing', () => {
    // Nothing in this test file registers a global provider.
    const global = trace.getTracerProvider();
    assert.ok(global instanceof ProxyTracerProvider);
    assert.ok(!(global.getDelegate() instanceof TracerProvider), 'no SDK is registered globally');

    // A pipeline that exists but is not registered must see nothing either.
    const bystander = pipeline('decode');

    // Capture every span the API's proxy tracer hands out while the emitter runs.
    const started: Span[] = [];
    const original = ProxyTracer.prototype.startSpan;
    ProxyTracer.prototype.startSpan = function (this: ProxyTracer, ...args: Parameters<ProxyTracer['startSpan']>) {
      const span = original.apply(this, args);
      started.push(span);
      return span;
    };
    try {
      const noop = createPdEmitter();
      const withParent = createPdEmitter(undefined, {
        contextFor: () => parentContext('4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7'),
      });
      for (const emitter of [noop, withParent]) {
        for (const c of CASES) assert.doesNotThrow(() => c.emit(emitter), c.title);
        assert.doesNotThrow(() => emitter.handoff(REQ));
        assert.doesNotThrow(() =>
          emitter.transferChunk(REQ, { rank: 0, chunkIndex: 0, pages: [], status: 'ok', bytes: 0, decodeEngineId: 'd' }, { start: START }),
        );
      }
    } finally {
      ProxyTracer.prototype.startSpan = original;
    }

    assert.equal(started.length, 2 * (CASES.length + 2), 'every call went through the global API tracer');
    for (const span of started) {
      assert.equal(span.isRecording(), false, 'a no-op span records nothing');
      // A no-op span has no SDK state: no name, attributes or times to export.
      assert.equal('attributes' in span, false);
      assert.equal('startTime' in span, false);
    }
    assert.equal(bystander.exporter.getFinishedSpans().length, 0);
  });
});
