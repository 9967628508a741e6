import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import type { PdEvent, ValidationResult } from './events.ts';
import { Attr, CONTRACT_VERSION, DEFAULT_CLUSTER, EMITTED_BY, ROLES, ResourceAttr, type Role, SPAN_NAMES, SpanName } from './names.ts';
import type { AttrMap, AttrValue, OtlpSpan } from './otlp-model.ts';
import {
  DEFAULT_MAX_CLOCK_SKEW_MS,
  DEFAULT_RETENTION_DAYS,
  INT32_MAX,
  INT_COLUMNS,
  MAX_TIME_NS,
  spanTimeWindow,
  UINT32_MAX,
  type SpanTimeWindow,
} from './limits.ts';
import { validateSpan } from './validate.ts';

// ---------------------------------------------------------------------------------------------------------
// Factories: a valid resource per role and a valid span per contract span name.
// ---------------------------------------------------------------------------------------------------------

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const START_NS = 1_700_000_000_123_456_789n;
const INTERVAL_END_NS = START_NS + 2_500_000n;
const REQUEST_ID = 'room-81723';
const GENERATION = 3;

function resourceFor(role: Role): AttrMap {
  const common: AttrMap = {
    [ResourceAttr.serviceName]: `sglang-${role}`,
    [ResourceAttr.role]: role,
    [ResourceAttr.engineVersion]: `sglang-0.5.3+abort-ack-${role}`,
    [ResourceAttr.cluster]: 'us-east-1a',
  };
  switch (role) {
    case 'router':
      return { ...common, [ResourceAttr.engineId]: 'router-0' };
    case 'prefill':
      return { ...common, [ResourceAttr.engineId]: 'prefill-0', [ResourceAttr.transferBackend]: 'mooncake' };
    case 'decode':
      return {
        ...common,
        [ResourceAttr.engineId]: 'decode-0',
        [ResourceAttr.transferBackend]: 'nixl',
        [ResourceAttr.kvCapacitySlots]: 524_288,
      };
  }
}

/** `resourceFor` labels no experiment: the engine reference then carries empty strings. */
const NO_EXPERIMENT = { experimentArm: '', experimentRun: '' } as const;

/** The engine reference the validator should derive from `resourceFor(role)`. */
function engineFor(role: Role): PdEvent['engine'] {
  switch (role) {
    case 'router':
      return { role, id: 'router-0', version: 'sglang-0.5.3+abort-ack-router', backend: '', capacitySlots: 0, ...NO_EXPERIMENT };
    case 'prefill':
      return { role, id: 'prefill-0', version: 'sglang-0.5.3+abort-ack-prefill', backend: 'mooncake', capacitySlots: 0, ...NO_EXPERIMENT };
    case 'decode':
      return { role, id: 'decode-0', version: 'sglang-0.5.3+abort-ack-decode', backend: 'nixl', capacitySlots: 524_288, ...NO_EXPERIMENT };
  }
}

/** A valid span of each name: its own attributes and the event fields they must turn into. */
const SPECS: Record<SpanName, { interval: boolean; attrs: AttrMap; fields: Record<string, unknown> }> = {
  'pd.admission': {
    interval: false,
    attrs: { [Attr.admissionOutcome]: 'rejected', [Attr.admissionReason]: 'kv_capacity' },
    fields: { outcome: 'rejected', reason: 'kv_capacity' },
  },
  'pd.kv.alloc': {
    interval: false,
    attrs: { [Attr.kvPages]: [14, 15, 16, 17], [Attr.kvSlots]: 64 },
    fields: { pages: [14, 15, 16, 17], slots: 64 },
  },
  'pd.transfer': {
    interval: true,
    attrs: {
      [Attr.rank]: 1,
      [Attr.chunkIndex]: 4,
      [Attr.kvPages]: [30, 31, 32, 33],
      [Attr.transferStatus]: 'timeout',
      [Attr.transferBytes]: 1_179_648,
      [Attr.decodeEngineId]: 'decode-7',
    },
    fields: { rank: 1, chunkIndex: 4, pages: [30, 31, 32, 33], status: 'timeout', bytes: 1_179_648, decodeEngineId: 'decode-7' },
  },
  'pd.handoff': { interval: false, attrs: {}, fields: {} },
  'pd.hold': {
    interval: false,
    attrs: { [Attr.holdExpectedRanks]: [0, 1, 3], [Attr.holdTimeoutMs]: 30_000, [Attr.kvSlots]: 496, [Attr.kvPages]: [14, 15, 44] },
    fields: { expectedRanks: [0, 1, 3], timeoutMs: 30_000, slots: 496, pages: [14, 15, 44] },
  },
  'pd.drain': {
    interval: true,
    attrs: {
      [Attr.rank]: 2,
      [Attr.drainChunksDropped]: 5,
      [Attr.drainInflight]: 6,
      [Attr.drainFailedSends]: 7,
      [Attr.drainAckWithheld]: true,
      [Attr.decodeEngineId]: 'decode-3',
    },
    fields: { rank: 2, chunksDropped: 5, inflight: 6, failedSends: 7, ackWithheld: true, decodeEngineId: 'decode-3' },
  },
  'pd.ack': {
    interval: false,
    attrs: { [Attr.rank]: 1, [Attr.ackGeneration]: 2, [Attr.ackAccepted]: false },
    fields: { rank: 1, ackGeneration: 2, accepted: false },
  },
  'pd.timeout': {
    interval: false,
    attrs: { [Attr.timeoutMissingRanks]: [0, 2], [Attr.timeoutAction]: 'quarantine' },
    fields: { missingRanks: [0, 2], action: 'quarantine' },
  },
  'pd.release': {
    interval: false,
    attrs: { [Attr.releaseReason]: 'finished', [Attr.kvPages]: [14, 15, 44] },
    fields: { reason: 'finished', pages: [14, 15, 44] },
  },
  'pd.checksum': {
    interval: false,
    attrs: { [Attr.checksumOutcome]: 'mismatch' },
    fields: { outcome: 'mismatch' },
  },
  'pd.cancel': {
    interval: false,
    attrs: { [Attr.cancelTargets]: ['prefill-0', 'decode-0'] },
    fields: { targets: ['prefill-0', 'decode-0'] },
  },
};

/** The first role allowed to emit `name`. */
const roleOf = (name: SpanName): Role => EMITTED_BY[name][0]!;

function makeSpan(name: string, overrides: Partial<OtlpSpan> = {}): OtlpSpan {
  const spec = SPECS[name as SpanName] as (typeof SPECS)[SpanName] | undefined;
  return {
    traceId: TRACE_ID,
    spanId: SPAN_ID,
    parentSpanId: '',
    name,
    kind: 1,
    startTimeUnixNano: START_NS,
    endTimeUnixNano: spec?.interval ? INTERVAL_END_NS : START_NS,
    attributes: {
      [Attr.requestId]: REQUEST_ID,
      [Attr.generation]: GENERATION,
      // Deep copy, so a test that edits one span's arrays never edits the shared spec.
      ...(structuredClone(spec?.attrs ?? {}) as AttrMap),
    },
    statusCode: 0,
    statusMessage: '',
    ...overrides,
  };
}

/** A copy of `map` with each key of `patch` set, or removed where the patch value is `undefined`. */
function patched(map: AttrMap, patch: Record<string, AttrValue | undefined>): AttrMap {
  const out: AttrMap = { ...map };
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) delete out[key];
    else out[key] = value;
  }
  return out;
}

function validSpan(name: SpanName, patch: Record<string, AttrValue | undefined> = {}, overrides: Partial<OtlpSpan> = {}): OtlpSpan {
  const span = makeSpan(name, overrides);
  return { ...span, attributes: patched(span.attributes, patch) };
}

function assertValid(result: ValidationResult): PdEvent {
  if (result.status !== 'valid') assert.fail(`expected a valid span, got ${JSON.stringify(result)}`);
  return result.event;
}

/** Asserts an `invalid` result for `spanName` whose reason contains every one of `parts`. */
function assertInvalid(result: ValidationResult, spanName: string, ...parts: string[]): string {
  if (result.status !== 'invalid') assert.fail(`expected an invalid span, got ${result.status}`);
  assert.equal(result.spanName, spanName);
  assert.equal(typeof result.reason, 'string');
  for (const part of parts)
    assert.ok(result.reason.includes(part), `reason ${JSON.stringify(result.reason)} should mention ${JSON.stringify(part)}`);
  return result.reason;
}

// ---------------------------------------------------------------------------------------------------------
// Acceptance
// ---------------------------------------------------------------------------------------------------------

describe('validateSpan: every contract span is accepted and typed exactly', () => {
  it('the factory covers all 11 span names', () => {
    assert.equal(SPAN_NAMES.length, 11);
    assert.deepEqual(Object.keys(SPECS).sort(), [...SPAN_NAMES].sort());
  });

  for (const name of SPAN_NAMES) {
    for (const role of EMITTED_BY[name]) {
      it(`${name} from a ${role} engine`, () => {
        const spec = SPECS[name];
        const result = validateSpan(makeSpan(name), resourceFor(role));
        const event = assertValid(result);
        const expected = {
          name,
          cluster: 'us-east-1a',
          requestId: REQUEST_ID,
          generation: GENERATION,
          contractVersion: CONTRACT_VERSION,
          engine: engineFor(role),
          traceId: TRACE_ID,
          spanId: SPAN_ID,
          startNs: START_NS,
          endNs: spec.interval ? INTERVAL_END_NS : START_NS,
          ...spec.fields,
        };
        // deepStrictEqual: every field, and no field besides them.
        assert.deepEqual(event, expected);
        assert.equal(event.contractVersion, 1);
      });
    }
  }

  it('every span is rejected from every role not allowed to emit it', () => {
    for (const name of SPAN_NAMES) {
      for (const role of ROLES) {
        if (EMITTED_BY[name].includes(role)) continue;
        const result = validateSpan(makeSpan(name), resourceFor(role));
        assertInvalid(result, name, `not by ${ResourceAttr.role}=${role}`);
      }
    }
  });

  it('typed fields carry the other values of each enum too', () => {
    const cases: Array<[SpanName, string, string, string]> = [
      ['pd.admission', Attr.admissionOutcome, 'accepted', 'outcome'],
      ['pd.transfer', Attr.transferStatus, 'ok', 'status'],
      ['pd.transfer', Attr.transferStatus, 'failed', 'status'],
      ['pd.timeout', Attr.timeoutAction, 'release', 'action'],
      ['pd.release', Attr.releaseReason, 'drained', 'reason'],
      ['pd.release', Attr.releaseReason, 'timeout', 'reason'],
      ['pd.release', Attr.releaseReason, 'forced', 'reason'],
      ['pd.checksum', Attr.checksumOutcome, 'ok', 'outcome'],
    ];
    for (const [name, key, value, field] of cases) {
      const event = assertValid(validateSpan(validSpan(name, { [key]: value }), resourceFor(roleOf(name))));
      assert.equal((event as unknown as Record<string, unknown>)[field], value, `${name} ${key}=${value}`);
    }
  });

  it('booleans carry both values', () => {
    const drain = assertValid(validateSpan(validSpan('pd.drain', { [Attr.drainAckWithheld]: false }), resourceFor('prefill')));
    assert.equal(drain.name === 'pd.drain' && drain.ackWithheld, false);
    const ack = assertValid(validateSpan(validSpan('pd.ack', { [Attr.ackAccepted]: true }), resourceFor('decode')));
    assert.equal(ack.name === 'pd.ack' && ack.accepted, true);
  });

  it('pd.admission without the optional reason has reason ""', () => {
    const event = assertValid(validateSpan(validSpan('pd.admission', { [Attr.admissionReason]: undefined }), resourceFor('router')));
    assert.equal(event.name, 'pd.admission');
    assert.equal(event.name === 'pd.admission' && event.reason, '');
  });

  it('cluster defaults to "default" when the resource has no pd.cluster', () => {
    for (const name of SPAN_NAMES) {
      const role = roleOf(name);
      const resource = patched(resourceFor(role), { [ResourceAttr.cluster]: undefined });
      const event = assertValid(validateSpan(makeSpan(name), resource));
      assert.equal(event.cluster, DEFAULT_CLUSTER);
      assert.equal(event.cluster, 'default');
    }
  });

  it('router spans do not require pd.transfer.backend (backend "" and capacity 0)', () => {
    const resource = patched(resourceFor('router'), {
      [ResourceAttr.transferBackend]: undefined,
      [ResourceAttr.kvCapacitySlots]: undefined,
    });
    for (const name of ['pd.admission', 'pd.cancel'] as const) {
      const event = assertValid(validateSpan(makeSpan(name), resource));
      assert.equal(event.engine.backend, '');
      assert.equal(event.engine.capacitySlots, 0);
    }
  });

  it('a router that does declare a backend and capacity keeps them', () => {
    const resource = patched(resourceFor('router'), { [ResourceAttr.transferBackend]: 'mori', [ResourceAttr.kvCapacitySlots]: 12 });
    const event = assertValid(validateSpan(makeSpan('pd.cancel'), resource));
    assert.equal(event.engine.backend, 'mori');
    assert.equal(event.engine.capacitySlots, 12);
  });

  it('an engine labelled with an experiment arm and run carries them, on every role', () => {
    for (const name of SPAN_NAMES) {
      const resource = patched(resourceFor(roleOf(name)), { [ResourceAttr.experimentArm]: 'fix', [ResourceAttr.experimentRun]: 'run-3' });
      const event = assertValid(validateSpan(makeSpan(name), resource));
      assert.equal(event.engine.experimentArm, 'fix');
      assert.equal(event.engine.experimentRun, 'run-3');
    }
  });

  it('an arm without a run keeps the arm and an empty run', () => {
    const resource = patched(resourceFor('decode'), { [ResourceAttr.experimentArm]: 'baseline' });
    const event = assertValid(validateSpan(makeSpan('pd.hold'), resource));
    assert.deepEqual([event.engine.experimentArm, event.engine.experimentRun], ['baseline', '']);
  });

  it('an experiment arm and run of exactly 1024 characters are accepted', () => {
    const long = 'a'.repeat(1024);
    const resource = patched(resourceFor('decode'), { [ResourceAttr.experimentArm]: long, [ResourceAttr.experimentRun]: long });
    const event = assertValid(validateSpan(makeSpan('pd.hold'), resource));
    assert.equal(event.engine.experimentArm, long);
    assert.equal(event.engine.experimentRun, long);
  });

  it('prefill engines do not need pd.kv.capacity_slots (capacity 0)', () => {
    const event = assertValid(validateSpan(makeSpan('pd.transfer'), resourceFor('prefill')));
    assert.equal(event.engine.capacitySlots, 0);
  });

  it('contract version: explicit 1 on the span or the resource is accepted', () => {
    const onSpan = assertValid(validateSpan(validSpan('pd.hold', { [Attr.contractVersion]: 1 }), resourceFor('decode')));
    assert.equal(onSpan.contractVersion, 1);
    const onResource = assertValid(validateSpan(makeSpan('pd.hold'), { ...resourceFor('decode'), [ResourceAttr.contractVersion]: 1 }));
    assert.equal(onResource.contractVersion, 1);
  });

  it('contract version: the span attribute wins over the resource (span 1, resource 2 is accepted)', () => {
    const event = assertValid(
      validateSpan(validSpan('pd.hold', { [Attr.contractVersion]: 1 }), { ...resourceFor('decode'), [ResourceAttr.contractVersion]: 2 }),
    );
    assert.equal(event.contractVersion, 1);
  });

  it('integer boundaries: 0 and the column maximum are accepted (2^32-1 for a UInt32, 2^53-1 for a UInt64)', () => {
    for (const generation of [0, UINT32_MAX]) {
      const event = assertValid(validateSpan(validSpan('pd.handoff', { [Attr.generation]: generation }), resourceFor('decode')));
      assert.equal(event.generation, generation);
    }
    const transfer = assertValid(
      validateSpan(validSpan('pd.transfer', { [Attr.transferBytes]: Number.MAX_SAFE_INTEGER }), resourceFor('prefill')),
    );
    assert.equal(transfer.name === 'pd.transfer' && transfer.bytes, Number.MAX_SAFE_INTEGER);
  });

  it('a string of exactly 1024 characters is accepted', () => {
    const id = 'r'.repeat(1024);
    const event = assertValid(validateSpan(validSpan('pd.handoff', { [Attr.requestId]: id }), resourceFor('decode')));
    assert.equal(event.requestId, id);
  });

  it('attributes outside the contract are ignored', () => {
    const span = validSpan('pd.checksum', {
      'pd.extra': { nested: [1, 'x', null] },
      'http.method': 'GET',
      'pd.bytes': new Uint8Array([1, 2]),
    });
    const event = assertValid(validateSpan(span, { ...resourceFor('decode'), 'host.name': 'gpu-17' }));
    assert.equal(event.name, 'pd.checksum');
  });

  it('an interval with end equal to start is accepted', () => {
    const event = assertValid(validateSpan(makeSpan('pd.transfer', { endTimeUnixNano: START_NS }), resourceFor('prefill')));
    assert.equal(event.endNs, event.startNs);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------------------------------------

interface RejectCase {
  title: string;
  name: string;
  role?: Role;
  span?: Record<string, AttrValue | undefined>;
  resource?: Record<string, AttrValue | undefined>;
  overrides?: Partial<OtlpSpan>;
  /** Substrings the reason must contain; the first is normally the offending key. */
  mentions: string[];
  /** The whole reason, when the spec quotes it. */
  exact?: string;
}

const LONG = 'x'.repeat(1025);

const REJECTIONS: RejectCase[] = [
  { title: 'missing pd.request.id', name: 'pd.handoff', span: { [Attr.requestId]: undefined }, mentions: [Attr.requestId, 'missing'] },
  {
    title: 'empty pd.request.id',
    name: 'pd.handoff',
    span: { [Attr.requestId]: '' },
    mentions: [Attr.requestId, 'non-empty', 'string ""'],
  },
  { title: 'pd.request.id that is a number', name: 'pd.handoff', span: { [Attr.requestId]: 42 }, mentions: [Attr.requestId, 'number 42'] },
  {
    title: 'missing pd.request.generation',
    name: 'pd.handoff',
    span: { [Attr.generation]: undefined },
    mentions: [Attr.generation],
    exact: 'pd.request.generation: expected a non-negative integer, span attribute missing',
  },
  {
    title: 'negative pd.request.generation',
    name: 'pd.handoff',
    span: { [Attr.generation]: -1 },
    mentions: [Attr.generation, 'non-negative integer', 'number -1'],
  },
  {
    title: 'fractional pd.request.generation',
    name: 'pd.handoff',
    span: { [Attr.generation]: 1.5 },
    mentions: [Attr.generation, 'number 1.5'],
  },
  {
    title: 'string pd.request.generation',
    name: 'pd.handoff',
    span: { [Attr.generation]: '3' },
    mentions: [Attr.generation, 'string "3"'],
  },
  {
    title: 'bigint pd.request.generation beyond 2^53',
    name: 'pd.handoff',
    span: { [Attr.generation]: 2n ** 53n + 1n },
    mentions: [Attr.generation, 'bigint 9007199254740993'],
  },
  {
    title: 'unsafe number pd.request.generation (2^53)',
    name: 'pd.handoff',
    span: { [Attr.generation]: 2 ** 53 },
    mentions: [Attr.generation],
  },
  { title: 'NaN pd.request.generation', name: 'pd.handoff', span: { [Attr.generation]: Number.NaN }, mentions: [Attr.generation] },
  {
    title: 'unknown pd.admission.outcome',
    name: 'pd.admission',
    span: { [Attr.admissionOutcome]: 'maybe' },
    mentions: [Attr.admissionOutcome, 'accepted|rejected', '"maybe"'],
  },
  {
    title: 'upper-case pd.admission.outcome',
    name: 'pd.admission',
    span: { [Attr.admissionOutcome]: 'Accepted' },
    mentions: [Attr.admissionOutcome],
  },
  {
    title: 'empty pd.admission.reason',
    name: 'pd.admission',
    span: { [Attr.admissionReason]: '' },
    mentions: [Attr.admissionReason, 'non-empty'],
  },
  {
    title: 'unknown pd.transfer.status',
    name: 'pd.transfer',
    span: { [Attr.transferStatus]: 'done' },
    mentions: [Attr.transferStatus, 'ok|failed|timeout', '"done"'],
  },
  {
    title: 'unknown pd.timeout.action',
    name: 'pd.timeout',
    span: { [Attr.timeoutAction]: 'retry' },
    mentions: [Attr.timeoutAction, 'release|quarantine', '"retry"'],
  },
  {
    title: 'unknown pd.release.reason',
    name: 'pd.release',
    span: { [Attr.releaseReason]: 'done' },
    mentions: [Attr.releaseReason],
    exact: 'pd.release.reason: expected one of drained|timeout|forced|finished, got string "done"',
  },
  {
    title: 'unknown pd.checksum.outcome',
    name: 'pd.checksum',
    span: { [Attr.checksumOutcome]: 'OK' },
    mentions: [Attr.checksumOutcome, 'ok|mismatch', '"OK"'],
  },
  {
    title: 'unknown pd.role',
    name: 'pd.handoff',
    resource: { [ResourceAttr.role]: 'encoder' },
    mentions: [ResourceAttr.role, 'router|prefill|decode', '"encoder"'],
  },
  {
    title: 'missing pd.role',
    name: 'pd.handoff',
    resource: { [ResourceAttr.role]: undefined },
    mentions: [ResourceAttr.role, 'resource attribute missing'],
  },
  {
    title: 'int array containing a string',
    name: 'pd.kv.alloc',
    span: { [Attr.kvPages]: [1, '2', 3] },
    mentions: [Attr.kvPages, 'array of non-negative integers', 'string "2"'],
  },
  {
    title: 'int array containing a negative',
    name: 'pd.hold',
    span: { [Attr.holdExpectedRanks]: [0, -1] },
    mentions: [Attr.holdExpectedRanks],
    exact: 'pd.hold.expected_ranks: expected an array of non-negative integers, got number -1',
  },
  {
    title: 'int array containing a float',
    name: 'pd.timeout',
    span: { [Attr.timeoutMissingRanks]: [0, 2.5] },
    mentions: [Attr.timeoutMissingRanks, 'number 2.5'],
  },
  { title: 'int array that is not an array', name: 'pd.release', span: { [Attr.kvPages]: 7 }, mentions: [Attr.kvPages, 'number 7'] },
  {
    title: 'int array containing a nested array',
    name: 'pd.transfer',
    span: { [Attr.kvPages]: [[1, 2]] },
    mentions: [Attr.kvPages, 'an array'],
  },
  {
    title: 'pd.drain.ack_withheld as the string "false"',
    name: 'pd.drain',
    span: { [Attr.drainAckWithheld]: 'false' },
    mentions: [Attr.drainAckWithheld, 'a boolean', 'string "false"'],
  },
  {
    title: 'pd.ack.accepted as the number 1',
    name: 'pd.ack',
    span: { [Attr.ackAccepted]: 1 },
    mentions: [Attr.ackAccepted, 'a boolean', 'number 1'],
  },
  {
    title: 'pd.cancel.targets containing a number',
    name: 'pd.cancel',
    span: { [Attr.cancelTargets]: ['decode-0', 7] },
    mentions: [Attr.cancelTargets, 'array of non-empty strings', 'number 7'],
  },
  {
    title: 'pd.cancel.targets containing an empty id',
    name: 'pd.cancel',
    span: { [Attr.cancelTargets]: ['decode-0', ''] },
    mentions: [Attr.cancelTargets, 'array of non-empty strings', 'string ""'],
  },
  {
    title: 'pd.transfer emitted by a decode engine',
    name: 'pd.transfer',
    role: 'decode',
    mentions: [ResourceAttr.role],
    exact: 'pd.transfer is emitted by prefill engines, not by pd.role=decode',
  },
  {
    title: 'pd.cancel emitted by a prefill engine',
    name: 'pd.cancel',
    role: 'prefill',
    mentions: ['pd.cancel', 'router', 'pd.role=prefill'],
  },
  {
    title: 'pd.admission emitted by a prefill engine',
    name: 'pd.admission',
    role: 'prefill',
    mentions: ['router or decode', 'pd.role=prefill'],
  },
  {
    title: 'unknown span name pd.bogus',
    name: 'pd.bogus',
    role: 'decode',
    mentions: ['pd.bogus'],
    exact: 'unknown PD span name "pd.bogus"',
  },
  {
    title: 'unknown span name pd.kv.free',
    name: 'pd.kv.free',
    role: 'decode',
    mentions: ['pd.kv.free'],
    exact: 'unknown PD span name "pd.kv.free"',
  },
  {
    title: 'contract version 2 on the span',
    name: 'pd.hold',
    span: { [Attr.contractVersion]: 2 },
    mentions: [Attr.contractVersion],
    exact: 'pd.contract.version: this receiver speaks contract version 1, the span declares 2',
  },
  {
    title: 'contract version 2 on the resource',
    name: 'pd.hold',
    resource: { [ResourceAttr.contractVersion]: 2 },
    mentions: [ResourceAttr.contractVersion, 'the resource declares 2'],
  },
  {
    title: 'contract version: span 2 wins over resource 1',
    name: 'pd.hold',
    span: { [Attr.contractVersion]: 2 },
    resource: { [ResourceAttr.contractVersion]: 1 },
    mentions: [Attr.contractVersion, 'declares 2'],
  },
  {
    title: 'contract version as a string',
    name: 'pd.hold',
    span: { [Attr.contractVersion]: '1' },
    mentions: [Attr.contractVersion, 'string "1"'],
  },
  {
    title: 'end before start',
    name: 'pd.transfer',
    overrides: { startTimeUnixNano: START_NS, endTimeUnixNano: START_NS - 1n },
    mentions: ['ends before it starts'],
    exact: 'span ends before it starts',
  },
  {
    title: 'zero start time',
    name: 'pd.handoff',
    overrides: { startTimeUnixNano: 0n, endTimeUnixNano: 0n },
    mentions: ['no start time'],
    exact: 'span has no start time',
  },
  {
    title: 'missing resource pd.engine.id',
    name: 'pd.handoff',
    resource: { [ResourceAttr.engineId]: undefined },
    mentions: [ResourceAttr.engineId, 'resource attribute missing'],
  },
  {
    title: 'missing resource pd.engine.version',
    name: 'pd.handoff',
    resource: { [ResourceAttr.engineVersion]: undefined },
    mentions: [ResourceAttr.engineVersion, 'resource attribute missing'],
  },
  {
    title: 'decode without pd.kv.capacity_slots',
    name: 'pd.hold',
    resource: { [ResourceAttr.kvCapacitySlots]: undefined },
    mentions: [ResourceAttr.kvCapacitySlots],
    exact: 'pd.kv.capacity_slots: expected a non-negative integer, resource attribute missing',
  },
  {
    title: 'decode with a string pd.kv.capacity_slots (OTEL_RESOURCE_ATTRIBUTES)',
    name: 'pd.hold',
    resource: { [ResourceAttr.kvCapacitySlots]: '524288' },
    mentions: [ResourceAttr.kvCapacitySlots, 'string "524288"'],
  },
  {
    title: 'prefill without pd.transfer.backend',
    name: 'pd.transfer',
    resource: { [ResourceAttr.transferBackend]: undefined },
    mentions: [ResourceAttr.transferBackend, 'resource attribute missing'],
  },
  {
    title: 'decode without pd.transfer.backend',
    name: 'pd.handoff',
    resource: { [ResourceAttr.transferBackend]: undefined },
    mentions: [ResourceAttr.transferBackend],
  },
  {
    title: 'empty resource pd.cluster',
    name: 'pd.handoff',
    resource: { [ResourceAttr.cluster]: '' },
    mentions: [ResourceAttr.cluster, 'non-empty'],
  },
  {
    title: 'pd.request.id longer than 1024 characters',
    name: 'pd.handoff',
    span: { [Attr.requestId]: LONG },
    mentions: [Attr.requestId, '1024'],
  },
  {
    title: 'pd.decode.engine.id longer than 1024 characters',
    name: 'pd.drain',
    span: { [Attr.decodeEngineId]: LONG },
    mentions: [Attr.decodeEngineId, '1024'],
  },
  {
    title: 'resource pd.engine.id longer than 1024 characters',
    name: 'pd.handoff',
    resource: { [ResourceAttr.engineId]: LONG },
    mentions: [ResourceAttr.engineId, '1024'],
  },
  {
    title: 'resource pd.experiment.arm longer than 1024 characters',
    name: 'pd.hold',
    resource: { [ResourceAttr.experimentArm]: LONG },
    mentions: [ResourceAttr.experimentArm, '1024'],
    exact: 'pd.experiment.arm: longer than 1024 characters',
  },
  {
    title: 'resource pd.experiment.run longer than 1024 characters',
    name: 'pd.transfer',
    resource: { [ResourceAttr.experimentArm]: 'fix', [ResourceAttr.experimentRun]: LONG },
    mentions: [ResourceAttr.experimentRun, '1024'],
    exact: 'pd.experiment.run: longer than 1024 characters',
  },
  {
    title: 'empty resource pd.experiment.arm',
    name: 'pd.hold',
    resource: { [ResourceAttr.experimentArm]: '' },
    mentions: [ResourceAttr.experimentArm, 'non-empty'],
  },
  {
    title: 'resource pd.experiment.run as a number',
    name: 'pd.hold',
    resource: { [ResourceAttr.experimentRun]: 3 },
    mentions: [ResourceAttr.experimentRun, 'number 3'],
  },
];

describe('validateSpan: rejections name the offending key', () => {
  for (const c of REJECTIONS) {
    it(c.title, () => {
      const role = c.role ?? roleOf(c.name as SpanName);
      const base = makeSpan(c.name, c.overrides);
      const span = { ...base, attributes: patched(base.attributes, c.span ?? {}) };
      const resource = patched(resourceFor(role), c.resource ?? {});
      const reason = assertInvalid(validateSpan(span, resource), c.name, ...c.mentions);
      if (c.exact !== undefined) assert.equal(reason, c.exact);
    });
  }

  it('quotes only the start of a long unknown span name', () => {
    const name = `pd.${'n'.repeat(3 * 1024 * 1024)}`;
    const reason = assertInvalid(validateSpan(makeSpan(name), resourceFor('decode')), name);
    assert.equal(reason, `unknown PD span name ${JSON.stringify(name.slice(0, 100))}… (${name.length} characters)`);
  });

  it('every span name rejects a missing pd.request.id and pd.request.generation', () => {
    for (const name of SPAN_NAMES) {
      const resource = resourceFor(roleOf(name));
      assertInvalid(validateSpan(validSpan(name, { [Attr.requestId]: undefined }), resource), name, Attr.requestId);
      assertInvalid(validateSpan(validSpan(name, { [Attr.generation]: undefined }), resource), name, Attr.generation);
    }
  });

  it('every required span attribute of every span is required', () => {
    for (const name of SPAN_NAMES) {
      for (const key of Object.keys(SPECS[name].attrs)) {
        if (key === Attr.admissionReason) continue; // optional
        const result = validateSpan(validSpan(name, { [key]: undefined }), resourceFor(roleOf(name)));
        assertInvalid(result, name, key, 'span attribute missing');
      }
    }
  });
});

describe('validateSpan: the order of checks follows the spec', () => {
  // Each case breaks two things; the reason must name the one the spec checks first.
  const orderCases: Array<{ title: string; span: OtlpSpan; resource: AttrMap; first: string }> = [
    {
      title: 'contract version before span name',
      span: validSpan('pd.bogus' as SpanName, { [Attr.contractVersion]: 2 }),
      resource: resourceFor('decode'),
      first: Attr.contractVersion,
    },
    {
      title: 'span name before resource',
      span: makeSpan('pd.bogus'),
      resource: patched(resourceFor('decode'), { [ResourceAttr.engineId]: undefined }),
      first: 'unknown PD span name',
    },
    {
      title: 'resource before role',
      span: makeSpan('pd.transfer'),
      resource: patched(resourceFor('decode'), { [ResourceAttr.engineId]: undefined }),
      first: ResourceAttr.engineId,
    },
    {
      title: 'role before timestamps',
      span: makeSpan('pd.transfer', { endTimeUnixNano: START_NS - 1n }),
      resource: resourceFor('decode'),
      first: 'pd.role=decode',
    },
    {
      title: 'timestamps before pd.cluster',
      span: makeSpan('pd.handoff', { endTimeUnixNano: START_NS - 1n }),
      resource: patched(resourceFor('decode'), { [ResourceAttr.cluster]: '' }),
      first: 'ends before it starts',
    },
    {
      title: 'pd.cluster before pd.request.id',
      span: validSpan('pd.handoff', { [Attr.requestId]: undefined }),
      resource: patched(resourceFor('decode'), { [ResourceAttr.cluster]: 7 }),
      first: ResourceAttr.cluster,
    },
    {
      title: 'pd.request.id before pd.request.generation',
      span: validSpan('pd.handoff', { [Attr.requestId]: undefined, [Attr.generation]: -1 }),
      resource: resourceFor('decode'),
      first: Attr.requestId,
    },
    {
      title: 'pd.request.generation before the span attributes',
      span: validSpan('pd.transfer', { [Attr.generation]: -1, [Attr.rank]: -1 }),
      resource: resourceFor('prefill'),
      first: Attr.generation,
    },
    {
      title: 'span attributes in listed order (pd.rank before pd.transfer.status)',
      span: validSpan('pd.transfer', { [Attr.transferStatus]: 'nope', [Attr.rank]: -1 }),
      resource: resourceFor('prefill'),
      first: Attr.rank,
    },
  ];
  for (const c of orderCases) {
    it(c.title, () => {
      const result = validateSpan(c.span, c.resource);
      if (result.status !== 'invalid') assert.fail(`expected invalid, got ${result.status}`);
      assert.ok(
        result.reason.startsWith(c.first) || result.reason.includes(c.first),
        `reason ${JSON.stringify(result.reason)} should be about ${c.first}`,
      );
    });
  }
});

describe('validateSpan: spans outside the pd. namespace are not ours', () => {
  for (const name of ['http.request', 'pdx.hold', 'PD.hold', 'Pd.hold', 'pd', 'pd_hold', '', ' pd.hold']) {
    it(JSON.stringify(name), () => {
      assert.deepEqual(validateSpan(makeSpan(name), resourceFor('decode')), { status: 'not_ours' });
      // Not ours regardless of how broken the resource or attributes are.
      assert.deepEqual(validateSpan(makeSpan(name, { attributes: {}, startTimeUnixNano: 0n, endTimeUnixNano: -5n }), {}), {
        status: 'not_ours',
      });
    });
  }
});

// ---------------------------------------------------------------------------------------------------------
// Robustness: the validator returns a result for any attribute values.
// ---------------------------------------------------------------------------------------------------------

/** mulberry32: a tiny deterministic PRNG with values in [0, 1). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('validateSpan: never throws', () => {
  it('returns a result for thousands of spans with random attribute values', () => {
    const rand = prng(0x5eed_1234);
    const int = (n: number) => Math.floor(rand() * n);
    const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
    const SPAN_KEYS = Object.values(Attr);
    const RESOURCE_KEYS = Object.values(ResourceAttr);
    const ENUM_STRINGS = [
      'accepted',
      'rejected',
      'ok',
      'failed',
      'timeout',
      'release',
      'quarantine',
      'drained',
      'forced',
      'finished',
      'mismatch',
      'router',
      'prefill',
      'decode',
    ];

    const randomValue = (depth: number): AttrValue => {
      switch (int(depth > 2 ? 9 : 11)) {
        case 0:
          return pick(['', 'x', 'decode-0', 'true', 'false', '1', '-1', 'x'.repeat(1024 + int(3)), '\u0000', '\u{1F600}', ...ENUM_STRINGS]);
        case 1:
          return pick([
            0,
            1,
            -1,
            1.5,
            -0,
            2 ** 53,
            Number.MAX_SAFE_INTEGER,
            Number.NaN,
            Number.POSITIVE_INFINITY,
            Number.NEGATIVE_INFINITY,
            int(100_000),
          ]);
        case 2:
          return rand() < 0.5;
        case 3:
          return pick([0n, 1n, -1n, 2n ** 53n + 1n, 2n ** 64n - 1n, -(2n ** 63n)]);
        case 4:
          return null;
        case 5:
          return new Uint8Array(int(5)).map(() => int(256));
        case 6:
          return int(1000);
        case 7:
          return pick(ENUM_STRINGS);
        case 8:
          return Array.from({ length: int(4) }, () => int(64));
        case 9: {
          const arr: AttrValue[] = [];
          for (let i = int(5); i > 0; i--) arr.push(randomValue(depth + 1));
          return arr;
        }
        default: {
          const obj: AttrMap = {};
          for (let i = int(4); i > 0; i--) obj[pick([...SPAN_KEYS, 'k', 'nested'])] = randomValue(depth + 1);
          return obj;
        }
      }
    };
    const mutate = (map: AttrMap, keys: readonly string[], count: number): AttrMap => {
      const out: AttrMap = { ...map };
      for (let i = 0; i < count; i++) {
        const key = rand() < 0.9 ? pick(keys) : `pd.random.${int(5)}`;
        if (rand() < 0.2) delete out[key];
        else out[key] = randomValue(0);
      }
      return out;
    };
    const randomNs = (): bigint =>
      pick([0n, -1n, 1n, START_NS, START_NS + BigInt(int(1_000_000)), START_NS - BigInt(int(1_000_000)), 2n ** 64n - 1n]);

    const counts = { valid: 0, invalid: 0, not_ours: 0 };
    const ITERATIONS = 4000;
    for (let i = 0; i < ITERATIONS; i++) {
      const name = rand() < 0.95 ? pick(SPAN_NAMES) : pick(['pd.bogus', 'http.request', 'pd.', 'pd.hold.x']);
      const role = rand() < 0.8 ? roleOf((SPAN_NAMES.includes(name as SpanName) ? name : 'pd.hold') as SpanName) : pick(ROLES);
      // Start from a valid span most of the time, so the random values reach every reader and some spans stay valid.
      const base = rand() < 0.1 ? makeSpan(name, { attributes: {} }) : makeSpan(name);
      const attributes = mutate(base.attributes, SPAN_KEYS, int(4));
      const resource =
        rand() < 0.1 ? mutate({}, RESOURCE_KEYS, int(8)) : mutate(resourceFor(role), RESOURCE_KEYS, rand() < 0.7 ? 0 : int(3));
      const timed = rand() < 0.1 ? { startTimeUnixNano: randomNs(), endTimeUnixNano: randomNs() } : {};
      const span: OtlpSpan = { ...base, ...timed, attributes };

      let result: ValidationResult;
      try {
        result = validateSpan(span, resource);
      } catch (error) {
        assert.fail(`iteration ${i}: validateSpan threw ${String(error)} for ${name}`);
      }
      assert.equal(typeof result, 'object', `iteration ${i}`);
      assert.ok(result !== null, `iteration ${i}`);
      counts[result.status]++;
      if (result.status === 'valid') {
        assert.equal(result.event.name, name, `iteration ${i}`);
        assert.ok(result.event.endNs >= result.event.startNs && result.event.startNs > 0n, `iteration ${i}`);
      } else if (result.status === 'invalid') {
        assert.equal(result.spanName, name);
        assert.ok(typeof result.reason === 'string' && result.reason.length > 0, `iteration ${i}: empty reason`);
      } else {
        assert.ok(!name.startsWith('pd.'), `iteration ${i}: ${name} reported not ours`);
      }
    }
    assert.equal(counts.valid + counts.invalid + counts.not_ours, ITERATIONS);
    // The loop explores both sides of the contract, not only one.
    assert.ok(counts.valid > 100, `valid: ${counts.valid}`);
    assert.ok(counts.invalid > 1000, `invalid: ${counts.invalid}`);
    assert.ok(counts.not_ours > 0, `not ours: ${counts.not_ours}`);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Limits: every value fits the column it is stored in, and times fit what can be stored and the window.
// ---------------------------------------------------------------------------------------------------------

/** Asserts an `invalid` result whose field is `field` and whose reason contains every one of `parts`. */
function assertRejected(result: ValidationResult, field: string, ...parts: string[]): string {
  if (result.status !== 'invalid')
    assert.fail(`expected an invalid span, got ${JSON.stringify(result, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
  assert.equal(result.field, field);
  for (const part of parts)
    assert.ok(result.reason.includes(part), `reason ${JSON.stringify(result.reason)} should mention ${JSON.stringify(part)}`);
  return result.reason;
}

/** The column each integer attribute lands in (pipeline/rows.ts), and the largest value its type holds. */
const STORED_IN: Record<string, string> = {
  [Attr.generation]: 'generation',
  [Attr.ackGeneration]: 'ack_generation',
  [ResourceAttr.kvCapacitySlots]: 'capacity_slots',
  [Attr.rank]: 'rank',
  [Attr.chunkIndex]: 'chunk_index',
  [Attr.kvPages]: 'pages',
  [Attr.kvSlots]: 'slots',
  [Attr.transferBytes]: 'transfer_bytes',
  [Attr.holdExpectedRanks]: 'expected_ranks',
  [Attr.holdTimeoutMs]: 'hold_timeout_ms',
  [Attr.drainChunksDropped]: 'chunks_dropped',
  [Attr.drainInflight]: 'inflight',
  [Attr.drainFailedSends]: 'failed_sends',
  [Attr.timeoutMissingRanks]: 'missing_ranks',
};
const TYPE_MAX: Record<string, number> = { UInt32: 2 ** 32 - 1, Int32: 2 ** 31 - 1, UInt64: Number.MAX_SAFE_INTEGER };

/** Each integer attribute on a span that carries it, the event field it becomes, and whether it is an array. */
const INT_CASES: Array<{ name: SpanName; key: string; field: string; where?: 'resource'; array?: boolean }> = [
  { name: 'pd.handoff', key: Attr.generation, field: 'generation' },
  { name: 'pd.ack', key: Attr.ackGeneration, field: 'ackGeneration' },
  { name: 'pd.hold', key: ResourceAttr.kvCapacitySlots, field: 'capacitySlots', where: 'resource' },
  { name: 'pd.transfer', key: Attr.rank, field: 'rank' },
  { name: 'pd.drain', key: Attr.rank, field: 'rank' },
  { name: 'pd.ack', key: Attr.rank, field: 'rank' },
  { name: 'pd.transfer', key: Attr.chunkIndex, field: 'chunkIndex' },
  { name: 'pd.kv.alloc', key: Attr.kvSlots, field: 'slots' },
  { name: 'pd.hold', key: Attr.kvSlots, field: 'slots' },
  { name: 'pd.transfer', key: Attr.transferBytes, field: 'bytes' },
  { name: 'pd.hold', key: Attr.holdTimeoutMs, field: 'timeoutMs' },
  { name: 'pd.drain', key: Attr.drainChunksDropped, field: 'chunksDropped' },
  { name: 'pd.drain', key: Attr.drainInflight, field: 'inflight' },
  { name: 'pd.drain', key: Attr.drainFailedSends, field: 'failedSends' },
  { name: 'pd.kv.alloc', key: Attr.kvPages, field: 'pages', array: true },
  { name: 'pd.transfer', key: Attr.kvPages, field: 'pages', array: true },
  { name: 'pd.hold', key: Attr.kvPages, field: 'pages', array: true },
  { name: 'pd.release', key: Attr.kvPages, field: 'pages', array: true },
  { name: 'pd.hold', key: Attr.holdExpectedRanks, field: 'expectedRanks', array: true },
  { name: 'pd.timeout', key: Attr.timeoutMissingRanks, field: 'missingRanks', array: true },
];

/** `name`'s valid span and resource with `key` set to `value` (an array holding 0 and `value` for array attributes). */
function withInt(c: (typeof INT_CASES)[number], value: AttrValue): ValidationResult {
  const set = { [c.key]: c.array ? [0, value] : value };
  const role = roleOf(c.name);
  return c.where === 'resource'
    ? validateSpan(makeSpan(c.name), { ...resourceFor(role), ...set })
    : validateSpan(validSpan(c.name, set), resourceFor(role));
}

describe('validateSpan: every integer fits the column it is stored in', () => {
  it('the declared column types are those of the spans table (migration 0001)', () => {
    const sql = readFileSync(new URL('../pipeline/migrations/0001_spans_and_lifecycles.sql', import.meta.url), 'utf8');
    const spansTable = sql.slice(sql.indexOf('spans{{local}}'), sql.indexOf('ENGINE'));
    for (const [key, column] of Object.entries(STORED_IN)) {
      const declared = new RegExp(`^\\s+${column} (?:Array\\()?(\\w+)`, 'm').exec(spansTable)?.[1];
      assert.ok(declared, `column ${column} in the spans table`);
      assert.equal(INT_COLUMNS[key]?.type, declared, `${key} is stored in ${column} ${declared}`);
      assert.equal(INT_COLUMNS[key]?.max, TYPE_MAX[declared], `${key}: the largest ${declared}`);
    }
    assert.equal(UINT32_MAX, 4_294_967_295);
    assert.equal(INT32_MAX, 2_147_483_647);
  });

  for (const c of INT_CASES) {
    const column = INT_COLUMNS[c.key]!;
    it(`${c.name} ${c.key}: ${column.max} (the largest ${column.type}) is accepted, ${column.max + 1} is rejected naming the field`, () => {
      const event = assertValid(withInt(c, column.max)) as unknown as Record<string, unknown>;
      const stored = c.where === 'resource' ? (event.engine as Record<string, unknown>)[c.field] : event[c.field];
      assert.deepEqual(stored, c.array ? [0, column.max] : column.max);
      // 2^53 is no longer a safe integer: out of range for the UInt64 column's exact part, not a non-integer.
      assertRejected(withInt(c, column.max + 1), c.key, c.key, `from 0 to ${column.max}`, column.type, `number ${column.max + 1}`);
    });
    it(`${c.name} ${c.key}: -1 is rejected as not a non-negative integer`, () => {
      assertRejected(withInt(c, -1), c.key, c.key, 'non-negative integer', 'number -1');
    });
  }

  it('the values once stored wrapped are rejected: generation 2^40, a page 2^33, rank 2^31+5', () => {
    assertRejected(
      validateSpan(validSpan('pd.handoff', { [Attr.generation]: 2 ** 40 }), resourceFor('decode')),
      Attr.generation,
      'number 1099511627776',
      'UInt32',
    );
    assertRejected(
      validateSpan(validSpan('pd.kv.alloc', { [Attr.kvPages]: [1, 2 ** 33, 3] }), resourceFor('decode')),
      Attr.kvPages,
      'number 8589934592',
      'UInt32',
    );
    assertRejected(
      validateSpan(validSpan('pd.transfer', { [Attr.rank]: 2 ** 31 + 5 }), resourceFor('prefill')),
      Attr.rank,
      'number 2147483653',
      'Int32',
    );
  });

  it('a bigint (an int64 past 2^53) is out of range of every column', () => {
    assertRejected(
      validateSpan(validSpan('pd.transfer', { [Attr.transferBytes]: 2n ** 60n }), resourceFor('prefill')),
      Attr.transferBytes,
      'bigint 1152921504606846976',
      'UInt64',
    );
    assertRejected(
      validateSpan(validSpan('pd.hold', { [Attr.kvPages]: [2n ** 60n] }), resourceFor('decode')),
      Attr.kvPages,
      'bigint 1152921504606846976',
    );
  });
});

const NS_PER_MS = 1_000_000n;
const NS_PER_DAY = 86_400_000_000_000n;
/** An instant (or an interval, given its end) of `name` at `startNs`. */
const at = (name: SpanName, startNs: bigint, endNs = startNs) =>
  validateSpan(makeSpan(name, { startTimeUnixNano: startNs, endTimeUnixNano: endNs }), resourceFor(roleOf(name)));

describe('validateSpan: times fit what can be stored', () => {
  it('MAX_TIME_NS is the last nanosecond of ClickHouse DateTime (2^32-1 seconds): 2106-02-07T06:28:15.999999999Z', () => {
    assert.equal(MAX_TIME_NS, (2n ** 32n - 1n) * 1_000_000_000n + 999_999_999n);
    assert.equal(new Date(Number(MAX_TIME_NS / NS_PER_MS)).toISOString(), '2106-02-07T06:28:15.999Z');
  });

  it('a start in the year 2300 (10413792000000000000 ns, past DateTime64(9) too) is rejected naming span.start_time', () => {
    const reason = assertRejected(
      at('pd.hold', 10_413_792_000_000_000_000n),
      'span.start_time',
      'span.start_time',
      '2300-01-01T00:00:00.000000000Z',
      'the last time holdscope can store',
    );
    assert.equal(
      reason,
      'span.start_time: 2300-01-01T00:00:00.000000000Z is later than 2106-02-07T06:28:15.999999999Z, the last time holdscope can store',
    );
  });

  it('a start at MAX_TIME_NS is accepted, one nanosecond later is rejected', () => {
    assert.equal(assertValid(at('pd.hold', MAX_TIME_NS)).startNs, MAX_TIME_NS);
    assertRejected(at('pd.hold', MAX_TIME_NS + 1n), 'span.start_time', '2106-02-07T06:28:16.000000000Z');
    assertRejected(at('pd.hold', 2n ** 64n - 1n), 'span.start_time');
  });

  it('an interval ending at MAX_TIME_NS is accepted, one ending a nanosecond later is rejected naming span.end_time', () => {
    assert.equal(assertValid(at('pd.transfer', START_NS, MAX_TIME_NS)).endNs, MAX_TIME_NS);
    assertRejected(at('pd.transfer', START_NS, MAX_TIME_NS + 1n), 'span.end_time', 'span.end_time', 'the last time holdscope can store');
  });

  it('checks times before pd.cluster, after the role', () => {
    const span = makeSpan('pd.handoff', { startTimeUnixNano: MAX_TIME_NS + 1n, endTimeUnixNano: MAX_TIME_NS + 1n });
    assertRejected(validateSpan(span, patched(resourceFor('decode'), { [ResourceAttr.cluster]: '' })), 'span.start_time');
    assertRejected(validateSpan(span, resourceFor('prefill')), ResourceAttr.role);
  });
});

describe('validateSpan: times within a receiver window (clock skew and retention)', () => {
  const nowMs = Date.UTC(2026, 11, 5, 12, 0, 0, 0);
  const window = spanTimeWindow(nowMs, 3_600_000, 30);
  const nowNs = BigInt(nowMs) * NS_PER_MS;
  const latest = nowNs + 3_600_000n * NS_PER_MS;
  const oldest = nowNs - 30n * NS_PER_DAY;
  const inWindow = (name: SpanName, startNs: bigint, endNs = startNs, w: SpanTimeWindow = window) =>
    validateSpan(makeSpan(name, { startTimeUnixNano: startNs, endTimeUnixNano: endNs }), resourceFor(roleOf(name)), w);

  it('spanTimeWindow: now, the skew and the oldest start in nanoseconds; defaults of 1 hour and 30 days', () => {
    assert.deepEqual(window, { nowNs, maxFutureSkewNs: 3_600_000_000_000n, oldestStartNs: oldest });
    assert.equal(DEFAULT_MAX_CLOCK_SKEW_MS, 3_600_000);
    assert.equal(DEFAULT_RETENTION_DAYS, 30);
    assert.deepEqual(spanTimeWindow(nowMs), window);
    assert.deepEqual(spanTimeWindow(nowMs, 0, 1), { nowNs, maxFutureSkewNs: 0n, oldestStartNs: nowNs - NS_PER_DAY });
  });

  it('a start exactly the skew ahead is accepted, one nanosecond further is rejected naming span.start_time', () => {
    assert.equal(assertValid(inWindow('pd.hold', latest)).startNs, latest);
    assertRejected(
      inWindow('pd.hold', latest + 1n),
      'span.start_time',
      'span.start_time',
      'clock skew of 3600000 ms',
      '2026-12-05T12:00:00.000000000Z',
    );
  });

  it('an interval ending more than the skew ahead is rejected naming span.end_time', () => {
    assert.equal(assertValid(inWindow('pd.transfer', nowNs, latest)).endNs, latest);
    assertRejected(inWindow('pd.transfer', nowNs, latest + 1n), 'span.end_time', 'span.end_time', 'clock skew');
  });

  it('a start exactly the retention back is accepted, one nanosecond earlier is rejected naming span.start_time', () => {
    assert.equal(assertValid(inWindow('pd.hold', oldest)).startNs, oldest);
    assertRejected(inWindow('pd.hold', oldest - 1n), 'span.start_time', 'span.start_time', 'retention', '2026-11-05T12:00:00.000000000Z');
    // The interval's end being recent does not save a start past the retention.
    assertRejected(inWindow('pd.transfer', oldest - 1n, nowNs), 'span.start_time', 'retention');
  });

  it('without a window only what can be stored is checked: a span of 2023 is accepted', () => {
    assertValid(at('pd.hold', START_NS));
    assertRejected(inWindow('pd.hold', START_NS), 'span.start_time', 'retention');
  });

  it('a zero skew takes nothing after now', () => {
    const strict = spanTimeWindow(nowMs, 0, 30);
    assertValid(inWindow('pd.hold', nowNs, nowNs, strict));
    assertRejected(inWindow('pd.hold', nowNs + 1n, nowNs + 1n, strict), 'span.start_time', 'clock skew of 0 ms');
  });

  it('spans not ours are not judged by the window', () => {
    assert.deepEqual(validateSpan(makeSpan('http.request', { startTimeUnixNano: 1n, endTimeUnixNano: 1n }), {}, window), {
      status: 'not_ours',
    });
  });
});

describe('values the decoder could not take as sent', () => {
  it('rejects a span whose time came as a JSON number past 2^53, naming the time', () => {
    const result = validateSpan({ ...validSpan('pd.drain'), inexactTime: 'endTimeUnixNano' }, resourceFor('prefill'));
    assert.equal(result.status, 'invalid');
    assert.equal((result as { field: string }).field, 'span.end_time');
    assert.match((result as { reason: string }).reason, /decimal strings/);
  });
});

describe('strings that are not Unicode text', () => {
  it('rejects the span naming the attribute, for a lone surrogate in any string attribute', () => {
    for (const text of ['\ud800', 'a\udc00b', '\udfff\ud800']) {
      const result = validateSpan(validSpan('pd.drain', { [Attr.decodeEngineId]: text }), resourceFor('prefill'));
      assert.equal(result.status, 'invalid', JSON.stringify(text));
      assert.equal((result as { field: string }).field, Attr.decodeEngineId);
      assert.match((result as { reason: string }).reason, /not valid Unicode text/);
    }
    assert.equal(validateSpan(validSpan('pd.drain', { [Attr.decodeEngineId]: 'décode-😀' }), resourceFor('prefill')).status, 'valid');
  });
});
