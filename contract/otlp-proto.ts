/**
 * OTLP/HTTP protobuf codec for traces: `ExportTraceServiceRequest` bytes <-> {@link OtlpTraceRequest}.
 * Decoding is ours, straight from the wire into the model: 64-bit values stay exact, hostile input ends as an
 * InputError, and with {@link DecodeLimits} nothing is allocated past the limits (a 4 MB body of empty values
 * must not become a million objects). protobufjs encodes, from a hand-written subset of opentelemetry-proto.
 */
import { isUtf8 } from 'node:buffer';
import protobuf from 'protobufjs';
import { InputError } from '../common/errors.ts';
import type { AttrMap, AttrValue, OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';

/** Deepest nesting of AnyValue arrays/kvlists accepted in either encoding. */
export const MAX_ANY_VALUE_DEPTH = 16;

// Field numbers are those of opentelemetry-proto (collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// resource/v1/resource.proto, common/v1/common.proto); the wire format is identical. Deliberate departures:
// - edition 2023 instead of proto3: explicit presence writes exactly the AnyValue member that is set, so
//   "" / 0 / false stay distinct from an empty AnyValue.
// - Span events (11) and links (13) are left out: the model has no place for them.
// - Enums are int32 (wire-identical), so unknown kinds and status codes pass through as numbers.
/** Put in front of a string whose bytes were not UTF-8: a lone surrogate, which no valid text holds. */
const NOT_UNICODE_MARK = '\uDC00';

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

const root = protobuf.parse(SCHEMA).root;
const RequestType = root.lookupType('otlp.ExportTraceServiceRequest');
const SpanType = root.lookupType('otlp.Span');
const ResourceType = root.lookupType('otlp.Resource');
const ScopeType = root.lookupType('otlp.InstrumentationScope');
// Without long.js, protobufjs writes 64-bit fields from JS numbers and would round timestamps.
if (!protobuf.util.Long) throw new Error('protobufjs cannot load its "long" dependency; 64-bit values would be rounded');

// The shapes protobufjs encodes from (camelCase names).
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

// ---------------------------------------------------------------------------------------------------------
// Decoding

/**
 * Bounds on what one decode may allocate, for a receiver of untrusted bodies. Without them a decode is
 * faithful and unbounded (a body of N bytes can become 50 N bytes of objects).
 */
export interface DecodeLimits {
  /** Most spans in the request; one more ends the decode with a {@link LimitError}. */
  maxSpans: number;
  /** Most attributes kept per span or resource; past it the map is cut (see {@link BoundedDecode.cut}). */
  maxAttributes: number;
  /** Most values one attribute holds, nested array items and key-value entries counted; past it the value is cut. */
  maxValueItems: number;
  /** Rough bytes the decoded request may take in memory; past it the decode ends with a {@link LimitError}. */
  maxDecodedBytes: number;
  /** When set, spans whose name lacks this prefix come without attributes (the receiver only counts them). */
  attributesOnlyWithPrefix?: string;
}

/** Why an attribute map was cut short while decoding; every span under it breaks the limits. */
export interface Cut {
  field: 'attribute_count' | 'attribute_length';
  /** Says what was there, e.g. `x.pages: an array of 900000 items, more than the limit of 4096 values`. */
  reason: string;
}

export interface BoundedDecode {
  request: OtlpTraceRequest;
  /**
   * Attribute maps (of spans or resources) that the limits cut short: they hold only what fit, so their
   * spans must be rejected, with this reason, never forwarded as they are.
   */
  cut: Map<AttrMap, Cut>;
  /**
   * Each decoded span's own protobuf bytes (a view of the body, not a copy), for a forwarder to pass on as they came
   * rather than encode the decoded span again: they decode to the same span, and keep what the model has no place
   * for (events, links, unknown fields). Spans outside `attributesOnlyWithPrefix` have none; a JSON decode, none at all.
   */
  spanBytes?: ReadonlyMap<OtlpSpan, Uint8Array>;
}

/** A body within the size limit whose content still exceeds a decode limit: too large (413), not malformed. */
export class LimitError extends InputError {}

/** Counts one more span of a request against the limit (both decoders call it as they meet each span). */
export function countSpanWithin(spansSoFar: number, maxSpans: number): number {
  const count = spansSoFar + 1;
  if (count > maxSpans) throw new LimitError(`more than ${maxSpans} spans in one request; the limit is ${maxSpans}`);
  return count;
}

/** A span with every field at its protobuf default, for a decoder to fill in. */
export function emptySpan(attributes: AttrMap): OtlpSpan {
  return {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startTimeUnixNano: 0n,
    endTimeUnixNano: 0n,
    attributes,
    statusCode: 0,
    statusMessage: '',
  };
}

/** Text of a key or name for a message: at most `max` characters, saying how long it was when longer. */
export function clipText(text: string, max = 128): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}

/** A wire-format failure: the body is not protobuf. */
class WireError extends Error {}
/** A well-formed body the model refuses (too deep); its location is filled in by the caller that knows it. */
class Bad extends Error {}

/** The protobufjs recursion limit for unknown groups (protoc's default recursion limit). */
const MAX_GROUP_DEPTH = 100;
/** Shared by spans decoded without attributes: never written to. */
const NO_ATTRIBUTES: AttrMap = Object.freeze(Object.create(null) as AttrMap);

/** Rough V8 sizes (64-bit heap) of the model's parts, for DecodeLimits.maxDecodedBytes: an estimate, charged as they are built. */
export const DECODE_COST = {
  span: 400,
  scopeSpans: 200,
  resourceSpans: 300,
  map: 200,
  entry: 48,
  string: 24,
  bytes: 200,
  array: 40,
  slot: 8,
  number: 16,
  bigint: 32,
  /** An object or array JSON.parse builds (measured: about 80 bytes), before the JSON decoder turns it into the model. */
  jsonContainer: 80,
} as const;
const COST = DECODE_COST;

export function decodeOtlpProtobuf(body: Uint8Array): OtlpTraceRequest {
  return decodeWith(body, undefined, false).request;
}

/**
 * Decodes within `limits`: more spans or a larger decoded form than allowed throw a {@link LimitError};
 * attributes past the count or value limits are skipped without decoding and their map reported in `cut`;
 * ResourceSpans and ScopeSpans without spans are dropped; spans outside `attributesOnlyWithPrefix` carry no
 * attributes.
 */
export function decodeOtlpProtobufBounded(body: Uint8Array, limits: DecodeLimits): BoundedDecode {
  return decodeWith(body, limits, true);
}

function decodeWith(body: Uint8Array, limits: DecodeLimits | undefined, keepSpanBytes: boolean): BoundedDecode {
  if (!(body instanceof Uint8Array)) throw new InputError('protobuf: body must be bytes');
  // A Buffer for native UTF-8 and hex decoding of slices.
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  // Only a forwarder (the collector, through the bounded decode) passes spans on: a reader's decode keeps no views.
  const decoder = new PbDecoder(buf, limits, keepSpanBytes);
  try {
    return { request: decoder.request(), cut: decoder.cut, spanBytes: decoder.spanBytes };
  } catch (err) {
    if (err instanceof LimitError) throw err;
    if (err instanceof WireError) throw new InputError(`protobuf: ${err.message}`);
    if (err instanceof Bad) throw new InputError(`protobuf: ${decoder.where()}.${err.message}`);
    // The recursion is bounded (16 AnyValue levels, 100 group levels), but a stack overflow must still end as bad input.
    if (err instanceof RangeError && err.message.includes('call stack')) throw new InputError('protobuf: nesting too deep', { cause: err });
    throw err;
  }
}

/**
 * One pass over an ExportTraceServiceRequest. Semantics follow protobuf (and protobufjs): unknown fields and
 * fields of an unexpected wire type are skipped, a singular message that repeats is merged, a scalar that
 * repeats takes its last value; an AnyValue holds its last member.
 */
class PbDecoder {
  private pos = 0;
  private lo = 0;
  private hi = 0;
  private spans = 0;
  private cost = 0;
  /** Values the top-level attribute being decoded may still hold (DecodeLimits.maxValueItems). */
  private itemsLeft = Infinity;
  /** Items of the top-level array or key-value list being decoded, skipped ones included. */
  private topItems = 0;
  // Where the decoder is, for the location of a Bad: k is -1 outside a span list.
  private i = 0;
  private j = 0;
  private k = -1;
  readonly cut = new Map<AttrMap, Cut>();
  readonly spanBytes = new Map<OtlpSpan, Uint8Array>();

  constructor(
    private readonly buf: Buffer,
    private readonly limits: DecodeLimits | undefined,
    private readonly keepSpanBytes: boolean,
  ) {}

  where(): string {
    return this.k >= 0 ? `resourceSpans[${this.i}].scopeSpans[${this.j}].spans[${this.k}]` : `resourceSpans[${this.i}].resource`;
  }

  request(): OtlpTraceRequest {
    const end = this.buf.length;
    const resourceSpans: OtlpResourceSpans[] = [];
    for (let i = 0; this.pos < end;) {
      const tag = this.tag(end);
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited(end);
        this.i = i++;
        const rs = this.resourceSpans(stop);
        if (rs) resourceSpans.push(rs);
      } else this.skip(tag, end, 0);
    }
    return { resourceSpans };
  }

  private resourceSpans(end: number): OtlpResourceSpans | undefined {
    // The resource is decoded last, and only for ResourceSpans that hold spans when limits apply.
    let resources: number[] | undefined;
    const scopeSpans: OtlpScopeSpans[] = [];
    for (let j = 0; this.pos < end;) {
      const tag = this.tag(end);
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited(end);
        (resources ??= []).push(this.pos, stop);
        this.pos = stop;
      } else if (tag === ((2 << 3) | 2)) {
        const stop = this.delimited(end);
        this.j = j++;
        const ss = this.scopeSpans(stop);
        if (ss) scopeSpans.push(ss);
      } else this.skip(tag, end, 0);
    }
    this.k = -1;
    if (this.limits && scopeSpans.length === 0) return undefined;
    this.charge(COST.resourceSpans);
    let resource: AttrMap;
    if (resources) {
      const keyValues: number[] = [];
      const after = this.pos;
      for (let r = 0; r < resources.length; r += 2) {
        this.pos = resources[r]!;
        const stop = resources[r + 1]!;
        while (this.pos < stop) {
          const tag = this.tag(stop);
          if (tag === ((1 << 3) | 2)) {
            const kvEnd = this.delimited(stop);
            keyValues.push(this.pos, kvEnd);
            this.pos = kvEnd;
          } else this.skip(tag, stop, 0);
        }
      }
      resource = this.attributes(keyValues);
      this.pos = after;
    } else {
      resource = this.newMap();
    }
    return { resource, scopeSpans };
  }

  private scopeSpans(end: number): OtlpScopeSpans | undefined {
    const scope = { name: '', version: '' };
    const spans: OtlpSpan[] = [];
    for (let k = 0; this.pos < end;) {
      const tag = this.tag(end);
      if (tag === ((2 << 3) | 2)) {
        const stop = this.delimited(end);
        this.k = k++;
        spans.push(this.span(stop));
        this.k = -1;
      } else if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited(end);
        // InstrumentationScope: name and version; its attributes have no place in the model.
        while (this.pos < stop) {
          const t = this.tag(stop);
          if (t === ((1 << 3) | 2)) scope.name = this.string(stop);
          else if (t === ((2 << 3) | 2)) scope.version = this.string(stop);
          else this.skip(t, stop, 0);
        }
      } else this.skip(tag, end, 0);
    }
    if (this.limits && spans.length === 0) return undefined;
    this.charge(COST.scopeSpans + scope.name.length + scope.version.length);
    return { scope, spans };
  }

  private span(end: number): OtlpSpan {
    const start = this.pos;
    const limits = this.limits;
    if (limits) this.spans = countSpanWithin(this.spans, limits.maxSpans);
    const span = emptySpan(NO_ATTRIBUTES);
    // KeyValue positions (start, end pairs): attributes are decoded once the name is known.
    let keyValues: number[] | undefined;
    while (this.pos < end) {
      const tag = this.tag(end);
      switch (tag) {
        case (1 << 3) | 2:
          span.traceId = this.hex(end);
          break;
        case (2 << 3) | 2:
          span.spanId = this.hex(end);
          break;
        case (4 << 3) | 2:
          span.parentSpanId = this.hex(end);
          break;
        case (5 << 3) | 2:
          span.name = this.string(end);
          break;
        case (6 << 3) | 0:
          span.kind = this.varint32(end) | 0;
          break;
        case (7 << 3) | 1:
          span.startTimeUnixNano = this.fixed64(end);
          break;
        case (8 << 3) | 1:
          span.endTimeUnixNano = this.fixed64(end);
          break;
        case (9 << 3) | 2: {
          const stop = this.delimited(end);
          (keyValues ??= []).push(this.pos, stop);
          this.pos = stop;
          break;
        }
        case (15 << 3) | 2: {
          const stop = this.delimited(end);
          while (this.pos < stop) {
            const t = this.tag(stop);
            if (t === ((2 << 3) | 2)) span.statusMessage = this.string(stop);
            else if (t === ((3 << 3) | 0)) span.statusCode = this.varint32(stop) | 0;
            else this.skip(t, stop, 0);
          }
          break;
        }
        default:
          this.skip(tag, end, 0);
      }
    }
    if (limits) {
      this.charge(COST.span + span.name.length);
      if (limits.attributesOnlyWithPrefix !== undefined && !span.name.startsWith(limits.attributesOnlyWithPrefix)) return span;
    }
    const after = this.pos;
    span.attributes = keyValues ? this.attributes(keyValues) : this.newMap();
    this.pos = after;
    if (this.keepSpanBytes) this.spanBytes.set(span, this.buf.subarray(start, end));
    return span;
  }

  /** A span's or resource's attributes from their KeyValue positions, within DecodeLimits.maxAttributes. */
  private attributes(keyValues: number[]): AttrMap {
    const map = this.newMap();
    const count = keyValues.length / 2;
    const kept = this.limits ? Math.min(count, this.limits.maxAttributes) : count;
    for (let n = 0; n < kept; n++) {
      this.pos = keyValues[2 * n]!;
      this.keyValue(map, keyValues[2 * n + 1]!, 0);
    }
    if (kept < count) {
      this.cut.set(map, { field: 'attribute_count', reason: `${count} attributes, more than the limit of ${kept}` });
    }
    return map;
  }

  private newMap(): AttrMap {
    this.charge(COST.map);
    // A null prototype keeps keys such as `__proto__` and `constructor` plain data.
    return Object.create(null) as AttrMap;
  }

  /** One KeyValue into `map`; at depth 0 (a span's or resource's own attribute) within DecodeLimits.maxValueItems. */
  private keyValue(map: AttrMap, end: number, depth: number): void {
    let key = '';
    let value: AttrValue | undefined;
    const top = depth === 0 && this.limits !== undefined;
    if (top) {
      this.itemsLeft = this.limits.maxValueItems;
      this.topItems = 0;
    }
    try {
      while (this.pos < end) {
        const tag = this.tag(end);
        if (tag === ((1 << 3) | 2)) key = this.string(end);
        else if (tag === ((2 << 3) | 2)) {
          const stop = this.delimited(end);
          value = this.anyValue(stop, depth, value);
        } else this.skip(tag, end, 0);
      }
    } catch (err) {
      if (err instanceof Bad && depth === 0) throw new Bad(`attributes[${JSON.stringify(clipText(key))}]: ${err.message}`);
      throw err;
    }
    this.charge(COST.entry + key.length);
    map[key] = value ?? null;
    if (top && this.itemsLeft < 0) {
      const max = this.limits.maxValueItems;
      const what = Array.isArray(value)
        ? this.topItems > max
          ? `an array of ${this.topItems} items, more than the limit of ${max} values`
          : `an array holding more than the limit of ${max} values (nested ones counted)`
        : this.topItems > max
          ? `a key-value list of ${this.topItems} entries, more than the limit of ${max} values`
          : `a key-value list holding more than the limit of ${max} values (nested ones counted)`;
      // The first cut of a map is the one reported.
      if (!this.cut.has(map)) this.cut.set(map, { field: 'attribute_length', reason: `${clipText(key)}: ${what}` });
    }
    if (top) this.itemsLeft = Infinity;
  }

  /** An AnyValue; `prev` is the value of an earlier AnyValue of the same field, which this one merges into. */
  private anyValue(end: number, depth: number, prev: AttrValue | undefined): AttrValue {
    let out: AttrValue = prev ?? null;
    const limits = this.limits;
    while (this.pos < end) {
      const tag = this.tag(end);
      switch (tag) {
        case (1 << 3) | 2: {
          const start = this.pos;
          out = this.string(end);
          if (limits) this.charge(COST.string + this.pos - start);
          break;
        }
        case (2 << 3) | 0:
          this.varint64(end);
          out = this.lo !== 0 || this.hi !== 0;
          break;
        case (3 << 3) | 0:
          this.varint64(end);
          out = int64FromHalves(this.lo, this.hi);
          if (limits) this.charge(typeof out === 'bigint' ? COST.bigint : COST.number);
          break;
        case (4 << 3) | 1:
          if (end - this.pos < 8) this.outOfRange(8, end);
          out = this.buf.readDoubleLE(this.pos);
          this.pos += 8;
          if (limits) this.charge(COST.number);
          break;
        case (5 << 3) | 2: {
          if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
          const stop = this.delimited(end);
          out = this.arrayValue(stop, depth + 1, Array.isArray(out) ? out : undefined);
          break;
        }
        case (6 << 3) | 2: {
          if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
          const stop = this.delimited(end);
          const into = out !== null && typeof out === 'object' && !Array.isArray(out) && !(out instanceof Uint8Array) ? out : undefined;
          out = this.kvlistValue(stop, depth + 1, into);
          break;
        }
        case (7 << 3) | 2: {
          const stop = this.delimited(end);
          if (limits) this.charge(COST.bytes + stop - this.pos);
          // A copy, so the value neither keeps the whole request body alive nor is a Buffer.
          out = new Uint8Array(stop - this.pos);
          out.set(this.buf.subarray(this.pos, stop));
          this.pos = stop;
          break;
        }
        default:
          this.skip(tag, end, 0);
      }
    }
    return out;
  }

  private arrayValue(end: number, depth: number, into: AttrValue[] | undefined): AttrValue[] {
    const limits = this.limits;
    if (limits && !into) this.charge(COST.array);
    const out = into ?? [];
    while (this.pos < end) {
      const tag = this.tag(end);
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited(end);
        if (depth === 1) this.topItems++;
        if (limits && --this.itemsLeft < 0) {
          this.pos = stop; // past the limit: skipped, not decoded
          continue;
        }
        if (limits) this.charge(COST.slot);
        out.push(this.anyValue(stop, depth, undefined));
      } else this.skip(tag, end, 0);
    }
    return out;
  }

  private kvlistValue(end: number, depth: number, into: AttrMap | undefined): AttrMap {
    const out = into ?? this.newMap();
    while (this.pos < end) {
      const tag = this.tag(end);
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited(end);
        if (depth === 1) this.topItems++;
        if (this.limits && --this.itemsLeft < 0) {
          this.pos = stop;
          continue;
        }
        this.keyValue(out, stop, depth);
      } else this.skip(tag, end, 0);
    }
    return out;
  }

  private charge(bytes: number): void {
    const limits = this.limits;
    if (limits && (this.cost += bytes) > limits.maxDecodedBytes) {
      throw new LimitError(
        `the request takes more than ${Math.round(limits.maxDecodedBytes / 1048576)} MiB of memory once decoded (too many spans, attributes or values); send smaller batches`,
      );
    }
  }

  // Wire primitives. `end` is the end of the enclosing message.

  private outOfRange(length: number, end: number): never {
    throw new WireError(`truncated or malformed message (index out of range: ${this.pos} + ${length} > ${end})`);
  }

  /** A varint value of up to 10 bytes, cut to its low 32 bits (uint32, int32, bool, enums). */
  private varint32(end: number): number {
    const buf = this.buf;
    let pos = this.pos;
    if (pos < end && buf[pos]! < 0x80) {
      this.pos = pos + 1;
      return buf[pos]!;
    }
    let value = 0;
    for (let shift = 0; shift < 70; shift += 7) {
      if (pos >= end) this.outOfRange(1, end);
      const b = buf[pos++]!;
      if (shift < 32) value |= (b & 0x7f) << shift;
      if (b < 0x80) {
        this.pos = pos;
        return value >>> 0;
      }
    }
    throw new WireError('invalid varint encoding');
  }

  /** A tag or a length: a varint of at most 5 bytes below 2^32 (2^31 for a length), as protobufjs requires. */
  private shortVarint(end: number, max5th: number, what: string): number {
    const buf = this.buf;
    let pos = this.pos;
    if (pos < end && buf[pos]! < 0x80) {
      this.pos = pos + 1;
      return buf[pos]!;
    }
    let value = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      if (pos >= end) this.outOfRange(1, end);
      const b = buf[pos++]!;
      value |= (b & 0x7f) << shift;
      if (b < 0x80) {
        this.pos = pos;
        return value >>> 0;
      }
    }
    if (pos >= end) this.outOfRange(1, end);
    const last = buf[pos++]!;
    if (last > max5th) throw new WireError(`invalid ${what} encoding`);
    this.pos = pos;
    return (value | (last << 28)) >>> 0;
  }

  private tag(end: number): number {
    return this.shortVarint(end, 15, 'tag');
  }

  /** A 64-bit varint into `lo` and `hi`. */
  private varint64(end: number): void {
    const buf = this.buf;
    let pos = this.pos;
    let lo = 0;
    let hi = 0;
    for (let n = 0; n < 10; n++) {
      if (pos >= end) this.outOfRange(1, end);
      const b = buf[pos++]!;
      const bits = b & 0x7f;
      if (n < 4) lo |= bits << (7 * n);
      else if (n === 4) {
        lo |= bits << 28;
        hi = bits >>> 4;
      } else hi |= bits << (7 * n - 32);
      if (b < 0x80) {
        this.pos = pos;
        this.lo = lo >>> 0;
        this.hi = hi >>> 0;
        return;
      }
    }
    throw new WireError('invalid varint encoding');
  }

  /** Reads a length prefix and returns where the length-delimited field ends; `pos` is at its start. */
  private delimited(end: number): number {
    const length = this.shortVarint(end, 7, 'length');
    if (length > end - this.pos) this.outOfRange(length, end);
    return this.pos + length;
  }

  private string(end: number): string {
    const stop = this.delimited(end);
    const start = this.pos;
    this.pos = stop;
    if (stop === start) return '';
    // Invalid UTF-8 must not be stored as if U+FFFD had been sent: a lone surrogate in front marks the value as not
    // Unicode, which the validator rejects for that span alone (a request is not refused for spans it does not read).
    const text = this.buf.toString('utf8', start, stop);
    return isUtf8(this.buf.subarray(start, stop)) ? text : NOT_UNICODE_MARK + text;
  }

  private hex(end: number): string {
    const stop = this.delimited(end);
    const start = this.pos;
    this.pos = stop;
    return stop === start ? '' : this.buf.toString('hex', start, stop);
  }

  private fixed64(end: number): bigint {
    if (end - this.pos < 8) this.outOfRange(8, end);
    const lo = this.buf.readUInt32LE(this.pos);
    const hi = this.buf.readUInt32LE(this.pos + 4);
    this.pos += 8;
    return hi === 0 ? BigInt(lo) : (BigInt(hi) << 32n) | BigInt(lo);
  }

  /** Skips the field whose tag was just read (unknown, or of an unexpected wire type). */
  private skip(tag: number, end: number, depth: number): void {
    const field = tag >>> 3;
    if (field === 0) throw new WireError('illegal tag: field number 0');
    switch (tag & 7) {
      case 0:
        for (let n = 0; ; n++) {
          if (n === 10) throw new WireError('invalid varint encoding');
          if (this.pos >= end) this.outOfRange(1, end);
          if (this.buf[this.pos++]! < 0x80) break;
        }
        return;
      case 1:
        if (end - this.pos < 8) this.outOfRange(8, end);
        this.pos += 8;
        return;
      case 2:
        this.pos = this.delimited(end);
        return;
      case 3:
        if (depth >= MAX_GROUP_DEPTH) throw new WireError('max depth exceeded');
        for (;;) {
          if (this.pos >= end) this.outOfRange(1, end);
          const inner = this.tag(end);
          if ((inner & 7) === 4) {
            if (inner >>> 3 === 0) throw new WireError('illegal tag: field number 0');
            if (inner >>> 3 !== field) throw new WireError('invalid end group tag');
            return;
          }
          this.skip(inner, end, depth + 1);
        }
      case 5:
        if (end - this.pos < 4) this.outOfRange(4, end);
        this.pos += 4;
        return;
      default:
        throw new WireError(`invalid wire type ${tag & 7} at offset ${this.pos}`);
    }
  }
}

/** int64 (two's complement halves) -> number when it is a safe integer, else an exact bigint. */
function int64FromHalves(lo: number, hi: number): number | bigint {
  // Outside ±2^53 the sum may round, but only to a value that still fails the safety test.
  const n = (hi | 0) * 4294967296 + lo;
  return Number.isSafeInteger(n) ? n : (BigInt(hi | 0) << 32n) | BigInt(lo);
}

// ---------------------------------------------------------------------------------------------------------
// Encoding

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
