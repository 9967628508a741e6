/**
 * OTLP/HTTP protobuf encoders for traces: {@link OtlpTraceRequest} -> `ExportTraceServiceRequest` bytes, written by
 * protobufjs from otlp-schema.ts, and the assembly of a request from parts encoded on their own.
 */
import { InputError } from '../common/errors.ts';
import { MAX_ANY_VALUE_DEPTH } from './otlp-limits.ts';
import type { AttrMap, AttrValue, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import { RequestType, ResourceType, ScopeType, SpanType, type Long64, type PbAnyValue, type PbKeyValue } from './otlp-schema.ts';

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

/** Protobuf bytes of one Span message: the bytes encodeOtlpProtobuf writes for it inside a request. */
export function encodeOtlpSpan(span: OtlpSpan): Uint8Array {
  return SpanType.encode(spanToPb(span)).finish();
}

/** Protobuf bytes of a Resource message with these attributes. */
export function encodeOtlpResource(resource: AttrMap): Uint8Array {
  return ResourceType.encode({ attributes: attrsToPb(resource, 0) }).finish();
}

/** Protobuf bytes of an InstrumentationScope message. */
export function encodeOtlpScope(scope: OtlpScopeSpans['scope']): Uint8Array {
  return ScopeType.encode({ name: scope.name, version: scope.version }).finish();
}

/** A request's parts, each encoded on its own (encodeOtlpResource, encodeOtlpScope, encodeOtlpSpan). */
export interface EncodedResourceSpans {
  resource: Uint8Array;
  scopeSpans: { scope: Uint8Array; spans: Uint8Array[] }[];
}

function varintBytes(n: number): number {
  let bytes = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    bytes++;
  }
  return bytes;
}

/** Bytes a length-delimited field of `length` bytes takes, its tag included (field numbers below 16). */
export function fieldBytes(length: number): number {
  return 1 + varintBytes(length) + length;
}

/**
 * An ExportTraceServiceRequest from parts encoded on their own: byte for byte what encodeOtlpProtobuf writes
 * for the same request, without encoding any part twice (the collector sizes spans before it groups them).
 */
export function assembleOtlpProtobuf(resourceSpans: EncodedResourceSpans[]): Buffer {
  const scopeSizes: number[] = [];
  const resourceSizes: number[] = [];
  let total = 0;
  for (const rs of resourceSpans) {
    let rsSize = fieldBytes(rs.resource.length);
    for (const ss of rs.scopeSpans) {
      let ssSize = fieldBytes(ss.scope.length);
      for (const span of ss.spans) ssSize += fieldBytes(span.length);
      scopeSizes.push(ssSize);
      rsSize += fieldBytes(ssSize);
    }
    resourceSizes.push(rsSize);
    total += fieldBytes(rsSize);
  }
  const out = Buffer.allocUnsafe(total);
  let pos = 0;
  const field = (number: number, length: number) => {
    out[pos++] = (number << 3) | 2;
    while (length >= 0x80) {
      out[pos++] = (length & 0x7f) | 0x80;
      length = Math.floor(length / 128);
    }
    out[pos++] = length;
  };
  const bytes = (b: Uint8Array) => {
    out.set(b, pos);
    pos += b.length;
  };
  let s = 0;
  resourceSpans.forEach((rs, r) => {
    field(1, resourceSizes[r]!);
    field(1, rs.resource.length);
    bytes(rs.resource);
    for (const ss of rs.scopeSpans) {
      field(2, scopeSizes[s++]!);
      field(1, ss.scope.length);
      bytes(ss.scope);
      for (const span of ss.spans) {
        field(2, span.length);
        bytes(span);
      }
    }
  });
  if (pos !== total) throw new Error(`assembleOtlpProtobuf: wrote ${pos} of ${total} bytes`);
  return out;
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
