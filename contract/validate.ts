import type { EngineRef, PdEvent, ValidationResult } from './events.ts';
import {
  AdmissionOutcome,
  Attr,
  ChecksumOutcome,
  CONTRACT_VERSION,
  DEFAULT_CLUSTER,
  EMITTED_BY,
  PD_PREFIX,
  ReleaseReason,
  ResourceAttr,
  Role,
  SPAN_NAMES,
  type SpanName,
  TimeoutAction,
  TransferStatus,
} from './names.ts';
import type { AttrMap, AttrValue, OtlpSpan } from './otlp-model.ts';
import { INT_COLUMNS, isoNanos, MAX_TIME_NS, type IntColumn, type SpanTimeWindow } from './limits.ts';

/** Raised inside the validator only; turned into an `invalid` result with its message as the reason. */
class Rejection extends Error {
  /** The attribute (or `span.name`, `span.time`, `span.start_time`, `span.end_time`) at fault: a bounded label for metrics. */
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

const SPAN_NAME_SET = new Set<string>(SPAN_NAMES);
const MAX_STRING = 1024;
/** How much of an unknown span name a rejection quotes. */
const MAX_QUOTED_NAME = 100;

/** The column an integer attribute is stored in; one missing from INT_COLUMNS is a bug here, not the sender's. */
function intColumn(key: string): IntColumn {
  const column = INT_COLUMNS[key];
  if (!column) throw new Error(`no column range declared for the integer attribute ${key}`);
  return column;
}

/** Whether `value` is a positive integer, so that only its size can keep it out of a column (a bigint is one past 2^53). */
function tooLarge(value: AttrValue | undefined): boolean {
  return (typeof value === 'number' && Number.isInteger(value) && value > 0) || (typeof value === 'bigint' && value > 0n);
}

function describe(value: AttrValue | undefined): string {
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Uint8Array) return 'bytes';
  if (value === null) return 'null';
  if (typeof value === 'object') return 'a key-value list';
  if (typeof value === 'string') return `string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)}`;
  return `${typeof value} ${String(value)}`;
}

/**
 * Whether a string is Unicode text (no lone surrogate): one that is not would be stored with U+FFFD in place of what was
 * sent (the protobuf decoder marks invalid UTF-8 with a lone surrogate, and JSON can carry one as `\ud800`).
 */
const isUnicode = (text: string) => (text as string & { isWellFormed(): boolean }).isWellFormed();
const NOT_UNICODE = (key: string) =>
  `${key}: not valid Unicode text (invalid UTF-8, or a lone UTF-16 surrogate); it cannot be stored as sent`;

/** Reads typed attributes from one attribute map, rejecting with a reason that names the key. */
class AttrReader {
  constructor(
    private readonly attrs: AttrMap,
    private readonly where: 'span' | 'resource',
  ) {}

  private fail(key: string, expected: string, value: AttrValue | undefined): never {
    const given = value === undefined ? `${this.where} attribute missing` : `got ${describe(value)}`;
    throw new Rejection(key, `${key}: expected ${expected}, ${given}`);
  }

  has(key: string): boolean {
    return this.attrs[key] !== undefined;
  }

  string(key: string): string {
    const value = this.attrs[key];
    if (typeof value !== 'string' || value.length === 0) this.fail(key, 'a non-empty string', value);
    if (value.length > MAX_STRING) throw new Rejection(key, `${key}: longer than ${MAX_STRING} characters`);
    if (!isUnicode(value)) throw new Rejection(key, NOT_UNICODE(key));
    return value;
  }

  optionalString(key: string, fallback: string): string {
    return this.has(key) ? this.string(key) : fallback;
  }

  /** Rejects a value its column cannot hold: ClickHouse would refuse the INSERT or store it wrapped. */
  private outOfRange(key: string, column: IntColumn, what: string, value: AttrValue | undefined): never {
    throw new Rejection(key, `${key}: expected ${what} from 0 to ${column.max} (stored as ${column.type}), got ${describe(value)}`);
  }

  int(key: string): number {
    const value = this.attrs[key];
    const column = intColumn(key);
    if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= column.max) return value + 0; // normalizes -0
    if (tooLarge(value)) this.outOfRange(key, column, 'an integer', value);
    this.fail(key, 'a non-negative integer', value);
  }

  optionalInt(key: string, fallback: number): number {
    return this.has(key) ? this.int(key) : fallback;
  }

  bool(key: string): boolean {
    const value = this.attrs[key];
    if (typeof value !== 'boolean') this.fail(key, 'a boolean', value);
    return value;
  }

  intArray(key: string): number[] {
    const value = this.attrs[key];
    if (!Array.isArray(value)) this.fail(key, 'an array of non-negative integers', value);
    const column = intColumn(key);
    for (const item of value) {
      if (typeof item !== 'number' || !Number.isSafeInteger(item) || item < 0 || item > column.max) {
        if (tooLarge(item)) this.outOfRange(key, column, 'items', item);
        this.fail(key, 'an array of non-negative integers', item);
      }
    }
    return value as number[];
  }

  stringArray(key: string): string[] {
    const value = this.attrs[key];
    if (!Array.isArray(value)) this.fail(key, 'an array of strings', value);
    for (const item of value) {
      if (typeof item !== 'string' || item.length === 0 || item.length > MAX_STRING)
        this.fail(key, `an array of non-empty strings of at most ${MAX_STRING} characters`, item);
      if (!isUnicode(item)) throw new Rejection(key, NOT_UNICODE(key));
    }
    return value as string[];
  }

  oneOf<T extends string>(key: string, allowed: Readonly<Record<string, T>>): T {
    const value = this.attrs[key];
    const values = allowedValues(allowed);
    if (typeof value !== 'string' || !values.has(value)) this.fail(key, `one of ${[...values].join('|')}`, value);
    return value as T;
  }
}

// The enums' values as sets, built once: oneOf runs for several attributes of every span.
const allowedSets = new WeakMap<object, Set<string>>();
function allowedValues(allowed: Readonly<Record<string, string>>): Set<string> {
  let values = allowedSets.get(allowed);
  if (!values) allowedSets.set(allowed, (values = new Set(Object.values(allowed))));
  return values;
}

function readEngine(resource: AttrReader): EngineRef {
  const role = resource.oneOf(ResourceAttr.role, Role);
  return {
    role,
    id: resource.string(ResourceAttr.engineId),
    version: resource.string(ResourceAttr.engineVersion),
    backend: role === 'router' ? resource.optionalString(ResourceAttr.transferBackend, '') : resource.string(ResourceAttr.transferBackend),
    capacitySlots: role === 'decode' ? resource.int(ResourceAttr.kvCapacitySlots) : resource.optionalInt(ResourceAttr.kvCapacitySlots, 0),
    experimentArm: resource.optionalString(ResourceAttr.experimentArm, ''),
    experimentRun: resource.optionalString(ResourceAttr.experimentRun, ''),
  };
}

/**
 * Turns one OTLP span and its resource into a typed PD event, or says why it cannot: a precise reason
 * naming the attribute for contract violations, `not_ours` for spans outside the `pd.` namespace. Every value
 * must fit the column it is stored in (contract/limits.ts); with a `window`, the span's times must also lie
 * within it (a receiver's clock skew and retention).
 */
export function validateSpan(span: OtlpSpan, resource: AttrMap, window?: SpanTimeWindow): ValidationResult {
  if (!span.name.startsWith(PD_PREFIX)) return { status: 'not_ours' };
  try {
    return { status: 'valid', event: toEvent(span, resource, window) };
  } catch (error) {
    if (error instanceof Rejection) return { status: 'invalid', spanName: span.name, field: error.field, reason: error.message };
    throw error;
  }
}

/** Rejects times holdscope cannot store (MAX_TIME_NS) and, given a window, times outside it. */
function checkTimes(span: OtlpSpan, window: SpanTimeWindow | undefined): void {
  if (span.inexactTime) {
    const field = span.inexactTime === 'startTimeUnixNano' ? 'span.start_time' : 'span.end_time';
    throw new Rejection(
      field,
      `${field}: sent as a JSON number past 2^53, whose last digits the JSON parser rounds; send 64-bit integers as decimal strings`,
    );
  }
  const start = span.startTimeUnixNano;
  const end = span.endTimeUnixNano;
  // The start first: the end is not before it, so when both are too late the start is the one to name.
  if (start > MAX_TIME_NS)
    throw new Rejection(
      'span.start_time',
      `span.start_time: ${isoNanos(start)} is later than ${isoNanos(MAX_TIME_NS)}, the last time holdscope can store`,
    );
  if (end > MAX_TIME_NS)
    throw new Rejection(
      'span.end_time',
      `span.end_time: ${isoNanos(end)} is later than ${isoNanos(MAX_TIME_NS)}, the last time holdscope can store`,
    );
  if (!window) return;
  const latest = window.nowNs + window.maxFutureSkewNs;
  const ahead = (field: string, ns: bigint) =>
    new Rejection(
      field,
      `${field}: ${isoNanos(ns)} is more than the allowed clock skew of ${window.maxFutureSkewNs / 1_000_000n} ms ahead of the receiver's clock (${isoNanos(window.nowNs)}); check the sender's clock`,
    );
  if (start > latest) throw ahead('span.start_time', start);
  if (end > latest) throw ahead('span.end_time', end);
  if (start < window.oldestStartNs) {
    throw new Rejection(
      'span.start_time',
      `span.start_time: ${isoNanos(start)} is before ${isoNanos(window.oldestStartNs)}, the oldest time kept (the retention)`,
    );
  }
}

// eslint-disable-next-line max-lines-per-function -- one case per PD span name, each reading its attributes: the contract as a table
function toEvent(span: OtlpSpan, resourceAttrs: AttrMap, window: SpanTimeWindow | undefined): PdEvent {
  const attrs = new AttrReader(span.attributes, 'span');
  const resource = new AttrReader(resourceAttrs, 'resource');
  const onSpan = attrs.has(Attr.contractVersion);
  const contractVersion = onSpan ? attrs.int(Attr.contractVersion) : resource.optionalInt(ResourceAttr.contractVersion, CONTRACT_VERSION);
  if (contractVersion !== CONTRACT_VERSION) {
    throw new Rejection(
      Attr.contractVersion,
      `${Attr.contractVersion}: this receiver speaks contract version ${CONTRACT_VERSION}, the ${onSpan ? 'span' : 'resource'} declares ${contractVersion}`,
    );
  }
  if (!SPAN_NAME_SET.has(span.name)) {
    // The name is quoted for the sender, but only its start: it can be megabytes long.
    const shown =
      span.name.length > MAX_QUOTED_NAME
        ? `${JSON.stringify(span.name.slice(0, MAX_QUOTED_NAME))}… (${span.name.length} characters)`
        : JSON.stringify(span.name);
    throw new Rejection('span.name', `unknown PD span name ${shown}`);
  }
  const name = span.name as SpanName;
  const engine = readEngine(resource);
  if (!EMITTED_BY[name].includes(engine.role)) {
    throw new Rejection(
      ResourceAttr.role,
      `${name} is emitted by ${EMITTED_BY[name].join(' or ')} engines, not by ${ResourceAttr.role}=${engine.role}`,
    );
  }
  if (span.endTimeUnixNano < span.startTimeUnixNano) throw new Rejection('span.time', 'span ends before it starts');
  if (span.startTimeUnixNano <= 0n) throw new Rejection('span.time', 'span has no start time');
  checkTimes(span, window);
  const base = {
    cluster: resource.optionalString(ResourceAttr.cluster, DEFAULT_CLUSTER),
    requestId: attrs.string(Attr.requestId),
    generation: attrs.int(Attr.generation),
    contractVersion,
    engine,
    traceId: span.traceId,
    spanId: span.spanId,
    startNs: span.startTimeUnixNano,
    endNs: span.endTimeUnixNano,
  };
  // Onto `base` rather than `{ ...base, … }`: on Node 20 a spread followed by more properties cost about 9 µs a span,
  // nearly all of the validation of the bench's workload (about 1 µs this way), in the collector and the pipeline.
  switch (name) {
    case 'pd.admission':
      return Object.assign(base, {
        name,
        outcome: attrs.oneOf(Attr.admissionOutcome, AdmissionOutcome),
        reason: attrs.optionalString(Attr.admissionReason, ''),
      });
    case 'pd.kv.alloc':
      return Object.assign(base, { name, pages: attrs.intArray(Attr.kvPages), slots: attrs.int(Attr.kvSlots) });
    case 'pd.transfer':
      return Object.assign(base, {
        name,
        rank: attrs.int(Attr.rank),
        chunkIndex: attrs.int(Attr.chunkIndex),
        pages: attrs.intArray(Attr.kvPages),
        status: attrs.oneOf(Attr.transferStatus, TransferStatus),
        bytes: attrs.int(Attr.transferBytes),
        decodeEngineId: attrs.string(Attr.decodeEngineId),
      });
    case 'pd.handoff':
      return Object.assign(base, { name });
    case 'pd.hold':
      return Object.assign(base, {
        name,
        expectedRanks: attrs.intArray(Attr.holdExpectedRanks),
        timeoutMs: attrs.int(Attr.holdTimeoutMs),
        slots: attrs.int(Attr.kvSlots),
        pages: attrs.intArray(Attr.kvPages),
      });
    case 'pd.drain':
      return Object.assign(base, {
        name,
        rank: attrs.int(Attr.rank),
        chunksDropped: attrs.int(Attr.drainChunksDropped),
        inflight: attrs.int(Attr.drainInflight),
        failedSends: attrs.int(Attr.drainFailedSends),
        ackWithheld: attrs.bool(Attr.drainAckWithheld),
        decodeEngineId: attrs.string(Attr.decodeEngineId),
      });
    case 'pd.ack':
      return Object.assign(base, {
        name,
        rank: attrs.int(Attr.rank),
        ackGeneration: attrs.int(Attr.ackGeneration),
        accepted: attrs.bool(Attr.ackAccepted),
      });
    case 'pd.timeout':
      return Object.assign(base, {
        name,
        missingRanks: attrs.intArray(Attr.timeoutMissingRanks),
        action: attrs.oneOf(Attr.timeoutAction, TimeoutAction),
      });
    case 'pd.release':
      return Object.assign(base, { name, reason: attrs.oneOf(Attr.releaseReason, ReleaseReason), pages: attrs.intArray(Attr.kvPages) });
    case 'pd.checksum':
      return Object.assign(base, { name, outcome: attrs.oneOf(Attr.checksumOutcome, ChecksumOutcome) });
    case 'pd.cancel':
      return Object.assign(base, { name, targets: attrs.stringArray(Attr.cancelTargets) });
  }
}
