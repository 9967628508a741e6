/**
 * OTLP/HTTP protobuf codec for traces: `ExportTraceServiceRequest` bytes <-> {@link OtlpTraceRequest}.
 * protobufjs does the wire work from a hand-written subset of opentelemetry-proto; the conversion to the
 * model is ours, so 64-bit values stay exact and hostile input ends as an InputError.
 */
import protobuf from 'protobufjs';
import { InputError } from '../common/errors.ts';
import type { AttrMap, AttrValue, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';

/** Deepest nesting of AnyValue arrays/kvlists accepted in either encoding. */
export const MAX_ANY_VALUE_DEPTH = 16;

// Field numbers are those of opentelemetry-proto (collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// resource/v1/resource.proto, common/v1/common.proto); the wire format is identical. Deliberate departures:
// - edition 2023 instead of proto3: explicit presence lets AnyValue drop its `oneof` (protobufjs's oneof setter
//   deletes the sibling members on every value, a fifth of decode time) while "" / 0 / false stay distinct
//   from an empty AnyValue; utf8_validation NONE decodes strings natively (invalid UTF-8 becomes U+FFFD).
// - Span events (11) and links (13) are left out: the model has no place for them, and protobufjs skips
//   unknown fields without materializing them.
// - Enums are int32 (wire-identical), so unknown kinds and status codes pass through as numbers.
const SCHEMA = `
edition = "2023";
option features.utf8_validation = NONE;
package otlp;

message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message InstrumentationScope {
  string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4;
}
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; fixed32 flags = 16;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10;
  uint32 dropped_events_count = 12; uint32 dropped_links_count = 14; Status status = 15;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
  ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
`;

const RequestType = protobuf.parse(SCHEMA).root.lookupType('otlp.ExportTraceServiceRequest');
// Without long.js, protobufjs reads 64-bit fields as JS numbers and silently rounds timestamps.
if (!protobuf.util.Long) throw new Error('protobufjs cannot load its "long" dependency; 64-bit values would be rounded');

// The shapes protobufjs decodes into (camelCase names; unset scalars read their default from the prototype).
interface Long64 {
  low: number;
  high: number;
}
interface PbAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: Long64 | number;
  doubleValue?: number;
  arrayValue?: { values: PbAnyValue[] };
  kvlistValue?: { values: PbKeyValue[] };
  bytesValue?: Uint8Array;
}
interface PbKeyValue {
  key: string;
  value?: PbAnyValue | null;
}
interface PbSpan {
  traceId: Uint8Array;
  spanId: Uint8Array;
  parentSpanId: Uint8Array;
  name: string;
  kind: number;
  startTimeUnixNano: Long64 | number;
  endTimeUnixNano: Long64 | number;
  attributes: PbKeyValue[];
  status?: { message: string; code: number } | null;
}
interface PbRequest {
  resourceSpans: {
    resource?: { attributes: PbKeyValue[] } | null;
    scopeSpans: { scope?: { name: string; version: string } | null; spans: PbSpan[] }[];
  }[];
}

/** A conversion failure whose location is filled in by the caller that knows it. */
class Bad extends Error {}

const hasOwn = Object.prototype.hasOwnProperty;

export function decodeOtlpProtobuf(body: Uint8Array): OtlpTraceRequest {
  if (!(body instanceof Uint8Array)) throw new InputError('protobuf: body must be bytes');
  // A Buffer makes protobufjs use its BufferReader: native UTF-8 decoding and Buffer slices for bytes.
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  let message: PbRequest;
  try {
    message = RequestType.decode(buf) as unknown as PbRequest;
  } catch (err) {
    throw new InputError(`protobuf: ${wireErrorReason(err)}`, { cause: err });
  }
  return fromPb(message);
}

function wireErrorReason(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  // protobufjs bounds its own recursion, but a stack overflow elsewhere must still end as bad input.
  if (text.includes('call stack')) return 'nesting too deep';
  if (text.startsWith('index out of range')) return `truncated or malformed message (${text})`;
  return text;
}

function fromPb(message: PbRequest): OtlpTraceRequest {
  const resourceSpans = [];
  // Loop positions, read only to say where a failure was; k is -1 while outside a span list.
  let i = 0;
  let j = 0;
  let k = -1;
  try {
    for (i = 0; i < message.resourceSpans.length; i++) {
      const rs = message.resourceSpans[i]!;
      const scopeSpans = [];
      for (j = 0; j < rs.scopeSpans.length; j++) {
        const ss = rs.scopeSpans[j]!;
        const spans: OtlpSpan[] = new Array(ss.spans.length);
        for (k = 0; k < ss.spans.length; k++) spans[k] = spanFromPb(ss.spans[k]!);
        k = -1;
        scopeSpans.push({ scope: { name: ss.scope?.name ?? '', version: ss.scope?.version ?? '' }, spans });
      }
      resourceSpans.push({ resource: attrsFromPb(rs.resource?.attributes ?? []), scopeSpans });
    }
  } catch (err) {
    if (!(err instanceof Bad)) throw err;
    const where = k >= 0 ? `resourceSpans[${i}].scopeSpans[${j}].spans[${k}]` : `resourceSpans[${i}].resource`;
    throw new InputError(`protobuf: ${where}.${err.message}`);
  }
  return { resourceSpans };
}

function spanFromPb(s: PbSpan): OtlpSpan {
  return {
    traceId: hex(s.traceId),
    spanId: hex(s.spanId),
    parentSpanId: hex(s.parentSpanId),
    name: s.name,
    kind: s.kind,
    startTimeUnixNano: u64(s.startTimeUnixNano),
    endTimeUnixNano: u64(s.endTimeUnixNano),
    attributes: attrsFromPb(s.attributes),
    statusCode: s.status?.code ?? 0,
    statusMessage: s.status?.message ?? '',
  };
}

function hex(bytes: Uint8Array): string {
  if (bytes.length === 0) return '';
  return (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes)).toString('hex');
}

function u64(v: Long64 | number): bigint {
  if (typeof v === 'number') return BigInt(v);
  return (BigInt(v.high >>> 0) << 32n) | BigInt(v.low >>> 0);
}

/** int64 -> number when it is a safe integer, else an exact bigint. */
function i64(v: Long64 | number): number | bigint {
  if (typeof v === 'number') return v;
  // Outside ±2^53 the sum may round, but only to a value that still fails the safety test.
  const n = (v.high | 0) * 4294967296 + (v.low >>> 0);
  return Number.isSafeInteger(n) ? n : (BigInt(v.high | 0) << 32n) | BigInt(v.low >>> 0);
}

function attrsFromPb(kvs: PbKeyValue[], depth = 0): AttrMap {
  // A null prototype keeps keys such as `__proto__` and `constructor` plain data.
  const map: AttrMap = Object.create(null);
  for (let i = 0; i < kvs.length; i++) {
    const kv = kvs[i]!;
    try {
      map[kv.key] = kv.value == null ? null : anyFromPb(kv.value, depth);
    } catch (err) {
      if (err instanceof Bad && depth === 0) throw new Bad(`attributes[${JSON.stringify(kv.key)}]: ${err.message}`);
      throw err;
    }
  }
  return map;
}

function anyFromPb(v: PbAnyValue, depth: number): AttrValue {
  // Only members present on the wire are own properties; the others read defaults from the prototype.
  if (hasOwn.call(v, 'stringValue')) return v.stringValue!;
  if (hasOwn.call(v, 'intValue')) return i64(v.intValue!);
  if (hasOwn.call(v, 'boolValue')) return v.boolValue!;
  if (hasOwn.call(v, 'doubleValue')) return v.doubleValue!;
  if (hasOwn.call(v, 'arrayValue')) {
    if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
    const values = v.arrayValue!.values;
    const out: AttrValue[] = new Array(values.length);
    for (let i = 0; i < values.length; i++) out[i] = anyFromPb(values[i]!, depth + 1);
    return out;
  }
  if (hasOwn.call(v, 'kvlistValue')) {
    if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
    return attrsFromPb(v.kvlistValue!.values, depth + 1);
  }
  // A copy, so the value neither keeps the whole request body alive nor is a Buffer.
  if (hasOwn.call(v, 'bytesValue')) return new Uint8Array(v.bytesValue!);
  return null;
}

export function encodeOtlpProtobuf(request: OtlpTraceRequest): Uint8Array {
  const message = {
    resourceSpans: request.resourceSpans.map((rs) => ({
      resource: { attributes: attrsToPb(rs.resource, 0) },
      scopeSpans: rs.scopeSpans.map((ss) => ({
        scope: { name: ss.scope.name, version: ss.scope.version },
        spans: ss.spans.map(spanToPb),
      })),
    })),
  };
  return RequestType.encode(message).finish();
}

function spanToPb(s: OtlpSpan): Record<string, unknown> {
  // Explicit presence writes every property set, so defaults are left out to keep bodies proto3-canonical.
  const span: Record<string, unknown> = {
    traceId: hexBytes(s.traceId, 'traceId'),
    spanId: hexBytes(s.spanId, 'spanId'),
    startTimeUnixNano: fixed64(s.startTimeUnixNano, 'startTimeUnixNano'),
    endTimeUnixNano: fixed64(s.endTimeUnixNano, 'endTimeUnixNano'),
    attributes: attrsToPb(s.attributes, 0),
  };
  if (s.parentSpanId !== '') span.parentSpanId = hexBytes(s.parentSpanId, 'parentSpanId');
  if (s.name !== '') span.name = s.name;
  if (s.kind !== 0) span.kind = s.kind;
  if (s.statusCode !== 0 || s.statusMessage !== '') {
    span.status = s.statusMessage === '' ? { code: s.statusCode } : { code: s.statusCode, message: s.statusMessage };
  }
  return span;
}

function hexBytes(text: string, field: string): Buffer {
  const bytes = Buffer.from(text, 'hex');
  // Buffer.from stops quietly at the first non-hex character; refuse instead of truncating an id.
  if (bytes.length * 2 !== text.length) throw new InputError(`protobuf: ${field}: not a hex string: ${JSON.stringify(text)}`);
  return bytes;
}

function fixed64(v: bigint, field: string): Long64 {
  if (typeof v !== 'bigint' || v < 0n || v > 0xffffffffffffffffn) {
    throw new InputError(`protobuf: ${field}: expected a bigint in [0, 2^64), got ${String(v)}`);
  }
  return { low: Number(v & 0xffffffffn) | 0, high: Number(v >> 32n) | 0 };
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function attrsToPb(map: AttrMap, depth: number): PbKeyValue[] {
  const out: PbKeyValue[] = [];
  for (const key of Object.keys(map)) out.push({ key, value: anyToPb(map[key]!, depth, key) });
  return out;
}

function anyToPb(v: AttrValue, depth: number, key: string): PbAnyValue {
  switch (typeof v) {
    case 'string':
      return { stringValue: v };
    case 'boolean':
      return { boolValue: v };
    case 'number':
      if (Number.isSafeInteger(v)) return { intValue: v };
      // Integral doubles that still fit int64 go as exact ints; the rest (fractions, NaN, ±Inf, huge) as doubles.
      if (Number.isInteger(v) && Math.abs(v) < 2 ** 63) return { intValue: int64(BigInt(v)) };
      return { doubleValue: v };
    case 'bigint':
      if (v < INT64_MIN || v > INT64_MAX) throw new InputError(`protobuf: attribute ${JSON.stringify(key)}: ${v} does not fit int64`);
      return { intValue: int64(v) };
  }
  if (v === null) return {};
  if (v instanceof Uint8Array) return { bytesValue: v };
  if (depth >= MAX_ANY_VALUE_DEPTH) {
    throw new InputError(`protobuf: attribute ${JSON.stringify(key)}: values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
  }
  if (Array.isArray(v)) return { arrayValue: { values: v.map((item) => anyToPb(item, depth + 1, key)) } };
  if (typeof v === 'object') return { kvlistValue: { values: attrsToPb(v, depth + 1) } };
  throw new InputError(`protobuf: attribute ${JSON.stringify(key)}: cannot encode a ${typeof v}`);
}

function int64(v: bigint): Long64 {
  return { low: Number(BigInt.asUintN(32, v)) | 0, high: Number(BigInt.asIntN(64, v) >> 32n) | 0 };
}
