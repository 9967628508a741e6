/**
 * OTLP/HTTP JSON codec for traces, per the OTLP JSON mapping: lowerCamelCase keys (snake_case accepted, as
 * protojson does), trace/span ids as hex (not base64), 64-bit integers as decimal strings (numbers accepted),
 * enums as integers (names accepted), bytes as base64.
 */
import { InputError } from '../common/errors.ts';
import type { AttrMap, AttrValue, OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import {
  clipText,
  DECODE_COST as COST,
  DecodeBudget,
  emptySpan,
  LimitError,
  MAX_ANY_VALUE_DEPTH,
  NO_ATTRIBUTES,
  type BoundedDecode,
  type DecodeLimits,
} from './otlp-limits.ts';

type Json = Record<string, unknown>;

/** A decoding failure; each enclosing level prepends its segment to `path` on the way out. */
class Bad extends Error {
  constructor(
    public path: string,
    reason: string,
  ) {
    super(reason);
  }
}

function within(err: unknown, segment: string): unknown {
  if (err instanceof Bad) err.path = err.path === '' || err.path.startsWith('[') ? segment + err.path : `${segment}.${err.path}`;
  return err;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'object') return 'an object';
  return String(v);
}

function object(v: unknown, path: string): Json {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Bad(path, `expected an object, got ${describe(v)}`);
  return v as Json;
}

/** protojson treats null like an absent field, so both give an empty list. */
function list(v: unknown, path: string): unknown[] {
  if (v == null) return [];
  if (!Array.isArray(v)) throw new Bad(path, `expected an array, got ${describe(v)}`);
  return v;
}

function str(v: unknown, path: string): string {
  if (v == null) return '';
  if (typeof v !== 'string') throw new Bad(path, `expected a string, got ${describe(v)}`);
  return v;
}

export function decodeOtlpJson(body: string | unknown): OtlpTraceRequest {
  return decodeWith(body, undefined).request;
}

/**
 * Decodes within `limits`, as decodeOtlpProtobufBounded does: more spans or a larger decoded form than allowed
 * throw a LimitError; attributes past the count or value limits are skipped and their map reported in `cut`;
 * ResourceSpans and ScopeSpans without spans are dropped; spans outside `attributesOnlyWithPrefix` carry no
 * attributes. JSON.parse still builds the whole document, so the body must be an object, and the objects and
 * arrays it would build count against maxDecodedBytes before it runs.
 */
export function decodeOtlpJsonBounded(body: string | unknown, limits: DecodeLimits): BoundedDecode {
  return decodeWith(body, new DecodeBudget(limits));
}

/**
 * Objects and arrays in a JSON text (outside strings), counted without parsing: what JSON.parse would build
 * (a body of `[[[[...` makes an array of every byte). Malformed text may be miscounted; JSON.parse refuses it.
 */
export function jsonContainers(bytes: Uint8Array): number {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let count = 0;
  for (let i = 0; i < buf.length;) {
    const c = buf[i]!;
    if (c === 0x22) {
      // A string: jump to its closing quote, one not escaped by an odd run of backslashes.
      let end = buf.indexOf(0x22, i + 1);
      for (;;) {
        if (end === -1) return count;
        let slashes = 0;
        while (buf[end - 1 - slashes] === 0x5c) slashes++;
        if (slashes % 2 === 0) break;
        end = buf.indexOf(0x22, end + 1);
      }
      i = end + 1;
      continue;
    }
    if (c === 0x7b || c === 0x5b) count++;
    i++;
  }
  return count;
}

function decodeWith(body: string | unknown, budget: DecodeBudget | undefined): BoundedDecode {
  let doc = body;
  if (typeof body === 'string' || body instanceof Uint8Array) {
    if (budget) {
      const bytes = typeof body === 'string' ? Buffer.from(body) : body;
      // A request is a JSON object: anything else is refused unparsed (`[[[[…` would make an array per byte).
      let first = 0;
      while (first < bytes.length && (bytes[first] === 0x20 || bytes[first] === 0x0a || bytes[first] === 0x0d || bytes[first] === 0x09))
        first++;
      if (first < bytes.length && bytes[first] !== 0x7b) {
        throw new InputError(
          `json: expected an object (an ExportTraceServiceRequest), got text starting ${JSON.stringify(String.fromCharCode(bytes[first]!))}`,
        );
      }
      // What JSON.parse will build counts against the budget too, before it is built.
      budget.charge(COST.jsonContainer * jsonContainers(bytes));
    }
    const text = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new InputError(`json: not valid JSON: ${(err as Error).message}`, { cause: err });
    }
  }
  try {
    return { request: requestFromJson(doc, budget), cut: budget?.cut ?? new Map() };
  } catch (err) {
    if (err instanceof LimitError) throw err;
    if (err instanceof Bad) throw new InputError(`json: ${err.path === '' ? '' : `${err.path}: `}${err.message}`);
    // Exotic (non-JSON) objects can still make property access throw; that is bad input too.
    throw new InputError(`json: cannot decode request: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

function requestFromJson(doc: unknown, budget: DecodeBudget | undefined): OtlpTraceRequest {
  const o = object(doc, '');
  const items = list(o.resourceSpans ?? o.resource_spans, 'resourceSpans');
  const resourceSpans: OtlpResourceSpans[] = [];
  for (let i = 0; i < items.length; i++) {
    try {
      const rs = resourceSpansFromJson(object(items[i], ''), budget);
      if (rs) resourceSpans.push(rs);
    } catch (err) {
      throw within(err, `resourceSpans[${i}]`);
    }
  }
  return { resourceSpans };
}

function resourceSpansFromJson(o: Json, budget: DecodeBudget | undefined): OtlpResourceSpans | undefined {
  // Within limits the resource is decoded after its spans, and only when there are some.
  let resource: AttrMap | undefined;
  const readResource = () =>
    o.resource != null ? attrsFromJson(object(o.resource, 'resource').attributes, 0, 'resource.attributes', budget) : newMap(budget);
  if (!budget) resource = readResource();
  const items = list(o.scopeSpans ?? o.scope_spans, 'scopeSpans');
  const scopeSpans: OtlpScopeSpans[] = [];
  for (let j = 0; j < items.length; j++) {
    try {
      const ss = scopeSpansFromJson(object(items[j], ''), budget);
      if (ss) scopeSpans.push(ss);
    } catch (err) {
      throw within(err, `scopeSpans[${j}]`);
    }
  }
  if (budget) {
    if (scopeSpans.length === 0) return undefined;
    budget.charge(COST.resourceSpans);
    resource = readResource();
  }
  return { resource: resource as AttrMap, scopeSpans };
}

function scopeSpansFromJson(o: Json, budget: DecodeBudget | undefined): OtlpScopeSpans | undefined {
  const scope = { name: '', version: '' };
  if (o.scope != null) {
    const s = object(o.scope, 'scope');
    scope.name = str(s.name, 'scope.name');
    scope.version = str(s.version, 'scope.version');
  }
  const items = list(o.spans, 'spans');
  if (budget && items.length === 0) return undefined;
  const spans: OtlpSpan[] = [];
  for (let k = 0; k < items.length; k++) {
    try {
      spans.push(spanFromJson(object(items[k], ''), budget));
    } catch (err) {
      throw within(err, `spans[${k}]`);
    }
  }
  budget?.charge(COST.scopeSpans + scope.name.length + scope.version.length);
  return { scope, spans };
}

function newMap(budget: DecodeBudget | undefined): AttrMap {
  budget?.charge(COST.map);
  // A null prototype keeps keys such as `__proto__` and `constructor` plain data.
  return Object.create(null) as AttrMap;
}

const SPAN_KINDS: Record<string, number> = {
  SPAN_KIND_UNSPECIFIED: 0,
  SPAN_KIND_INTERNAL: 1,
  SPAN_KIND_SERVER: 2,
  SPAN_KIND_CLIENT: 3,
  SPAN_KIND_PRODUCER: 4,
  SPAN_KIND_CONSUMER: 5,
};
const STATUS_CODES: Record<string, number> = { STATUS_CODE_UNSET: 0, STATUS_CODE_OK: 1, STATUS_CODE_ERROR: 2 };

function spanFromJson(o: Json, budget: DecodeBudget | undefined): OtlpSpan {
  budget?.countSpan();
  let attributes: unknown;
  const span = emptySpan(Object.create(null) as AttrMap);
  // One pass over the keys present serves both spellings; fields the model lacks (events, links...) are ignored.
  for (const key in o) {
    const v = o[key];
    if (v == null) continue;
    switch (key) {
      case 'traceId':
      case 'trace_id':
        span.traceId = hexId(v, 'traceId');
        break;
      case 'spanId':
      case 'span_id':
        span.spanId = hexId(v, 'spanId');
        break;
      case 'parentSpanId':
      case 'parent_span_id':
        span.parentSpanId = hexId(v, 'parentSpanId');
        break;
      case 'name':
        span.name = str(v, 'name');
        break;
      case 'kind':
        span.kind = enumValue(v, SPAN_KINDS, 'kind');
        break;
      case 'startTimeUnixNano':
      case 'start_time_unix_nano':
        span.startTimeUnixNano = spanTime(v, 'startTimeUnixNano', span);
        break;
      case 'endTimeUnixNano':
      case 'end_time_unix_nano':
        span.endTimeUnixNano = spanTime(v, 'endTimeUnixNano', span);
        break;
      case 'attributes':
        attributes = v; // once the name is known
        break;
      case 'status': {
        const s = object(v, 'status');
        span.statusCode = s.code == null ? 0 : enumValue(s.code, STATUS_CODES, 'status.code');
        span.statusMessage = str(s.message, 'status.message');
        break;
      }
    }
  }
  if (budget) {
    budget.charge(COST.span + span.name.length);
    const prefix = budget.limits.attributesOnlyWithPrefix;
    if (prefix !== undefined && !span.name.startsWith(prefix)) {
      span.attributes = NO_ATTRIBUTES;
      return span;
    }
  }
  if (attributes !== undefined) span.attributes = attrsFromJson(attributes, 0, 'attributes', budget);
  else if (budget) budget.charge(COST.map);
  return span;
}

function hexId(v: unknown, path: string): string {
  if (typeof v !== 'string') throw new Bad(path, `expected a hex string, got ${describe(v)}`);
  let upper = false;
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c >= 0x41 && c <= 0x46) upper = true;
    else if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) {
      throw new Bad(path, `expected a hex string (OTLP/JSON ids are hex, not base64), got ${describe(v)}`);
    }
  }
  if (v.length % 2 !== 0) throw new Bad(path, `expected an even number of hex digits, got ${describe(v)}`);
  return upper ? v.toLowerCase() : v;
}

function isDecimal(s: string, signed: boolean): boolean {
  const start = signed && s.charCodeAt(0) === 0x2d ? 1 : 0;
  if (s.length === start || s.length - start > 20) return false;
  for (let i = start; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

const UINT64_MAX = 2n ** 64n - 1n;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * A JSON number is a double: past 2^53 the parser has already rounded it (1796509239110000000 arrives as
 * 1796509239110000128), so a span time sent that way is not the time that was meant. The span says so, and the
 * validator rejects that span alone (OTLP/JSON writes 64-bit integers as decimal strings for this reason).
 */
function spanTime(v: unknown, path: 'startTimeUnixNano' | 'endTimeUnixNano', span: OtlpSpan): bigint {
  // Past 2^64 it is no uint64 at all: the request is malformed (400), as for any other type error.
  if (typeof v !== 'number' || !Number.isInteger(v) || Number.isSafeInteger(v) || v < 0 || v > 2 ** 64) return uint64(v, path);
  // Not the time that was sent (2^64 - 1 itself arrives as 2^64): the span is rejected for it, not the request.
  span.inexactTime = path;
  return BigInt(Math.min(v, Number.MAX_SAFE_INTEGER));
}

function uint64(v: unknown, path: string): bigint {
  let n: bigint | undefined;
  if (typeof v === 'string' && isDecimal(v, false)) n = BigInt(v);
  else if (typeof v === 'number' && Number.isInteger(v)) n = BigInt(v);
  if (n === undefined) throw new Bad(path, `expected a decimal string or integer, got ${describe(v)}`);
  if (n < 0n || n > UINT64_MAX) throw new Bad(path, `${v} is outside the uint64 range`);
  return n;
}

/**
 * int64 -> number when it is a safe integer, else an exact bigint. A JSON number past 2^53 stays the (rounded) number
 * it was parsed as: not an integer anyone sent, which the contract's validator rejects for a PD span's attribute, and
 * which must not fail the whole request by falling outside the int64 range once rounded (2^63 - 1 becomes 2^63).
 */
function int64(v: unknown, path: string): number | bigint {
  if (typeof v === 'number' && Number.isInteger(v)) return Number.isSafeInteger(v) ? v + 0 : v; // + 0 turns -0 into 0
  let n: bigint | undefined;
  if (typeof v === 'string' && isDecimal(v, true)) {
    if (v.length <= 15) return Number(v) + 0;
    n = BigInt(v);
  }
  if (n === undefined) throw new Bad(path, `expected a decimal string or integer, got ${describe(v)}`);
  if (n < INT64_MIN || n > INT64_MAX) throw new Bad(path, `${v} is outside the int64 range`);
  const small = Number(n);
  return Number.isSafeInteger(small) ? small : n;
}

function enumValue(v: unknown, names: Record<string, number>, path: string): number {
  if (typeof v === 'number' && Number.isInteger(v) && Math.abs(v) <= 0x7fffffff) return v;
  if (typeof v === 'string') {
    const named = Object.hasOwn(names, v) ? names[v] : undefined;
    if (named !== undefined) return named;
    if (isDecimal(v, true) && v.length <= 11) return Number(v);
  }
  throw new Bad(path, `expected an integer enum value, got ${describe(v)}`);
}

function double(v: unknown, path: string): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string') {
    // protojson spells non-finite doubles as strings, and allows numbers quoted.
    if (v === 'NaN') return NaN;
    if (v === 'Infinity') return Infinity;
    if (v === '-Infinity') return -Infinity;
    const n = Number(v);
    if (v.trim() === v && v !== '' && Number.isFinite(n)) return n;
  }
  throw new Bad(path, `expected a number, got ${describe(v)}`);
}

function base64(v: unknown, path: string): Uint8Array {
  if (typeof v !== 'string') throw new Bad(path, `expected a base64 string, got ${describe(v)}`);
  // Buffer.from skips characters outside the alphabet silently; check first so corrupt data is refused.
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    const ok =
      (c >= 0x41 && c <= 0x5a) ||
      (c >= 0x61 && c <= 0x7a) ||
      (c >= 0x30 && c <= 0x39) ||
      c === 0x2b ||
      c === 0x2f ||
      c === 0x2d ||
      c === 0x5f ||
      c === 0x3d;
    if (!ok) throw new Bad(path, `expected a base64 string, got ${describe(v)}`);
  }
  return Uint8Array.from(Buffer.from(v, 'base64'));
}

/**
 * Attributes (depth 0: a span's or resource's, within DecodeLimits.maxAttributes and, each, maxValueItems) or
 * the entries of a key-value list (deeper: each entry counts against the value's maxValueItems).
 */
function attrsFromJson(v: unknown, depth: number, path: string, budget: DecodeBudget | undefined): AttrMap {
  const items = list(v, path);
  const map = newMap(budget);
  const kept = budget && depth === 0 ? Math.min(items.length, budget.limits.maxAttributes) : items.length;
  for (let i = 0; i < kept; i++) {
    if (budget && depth > 0 && !budget.admitItem(depth)) continue;
    const kv = object(items[i], `${path}[${i}]`);
    const key = str(kv.key, `${path}[${i}].key`);
    if (budget && depth === 0) budget.startValue();
    let value: AttrValue;
    try {
      value = anyFromJson(kv.value, depth, budget);
    } catch (err) {
      throw within(err, `${path}[${JSON.stringify(clipText(key))}]`);
    }
    budget?.charge(COST.entry + key.length);
    map[key] = value;
    if (budget && depth === 0) budget.endValue(map, key, value);
  }
  if (kept < items.length) budget?.cutAttributes(map, items.length, kept);
  return map;
}

// eslint-disable-next-line max-lines-per-function -- one case per OTLP AnyValue member, as the protobuf decoder's
function anyFromJson(v: unknown, depth: number, budget: DecodeBudget | undefined): AttrValue {
  if (v == null) return null;
  const o = object(v, '');
  let out: AttrValue = null;
  let kind = '';
  for (const key in o) {
    const x = o[key];
    if (x == null) continue;
    let value: AttrValue;
    switch (key) {
      case 'stringValue':
      case 'string_value':
        if (typeof x !== 'string') throw new Bad('stringValue', `expected a string, got ${describe(x)}`);
        budget?.charge(COST.string + x.length * 2);
        value = x;
        break;
      case 'boolValue':
      case 'bool_value':
        if (typeof x !== 'boolean') throw new Bad('boolValue', `expected true or false, got ${describe(x)}`);
        value = x;
        break;
      case 'intValue':
      case 'int_value':
        value = int64(x, 'intValue');
        budget?.charge(typeof value === 'bigint' ? COST.bigint : COST.number);
        break;
      case 'doubleValue':
      case 'double_value':
        value = double(x, 'doubleValue');
        budget?.charge(COST.number);
        break;
      case 'bytesValue':
      case 'bytes_value':
        budget?.charge(COST.bytes + (typeof x === 'string' ? x.length : 0));
        value = base64(x, 'bytesValue');
        break;
      case 'arrayValue':
      case 'array_value': {
        if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad('', `values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
        const items = list(object(x, 'arrayValue').values, 'arrayValue.values');
        let arr: AttrValue[];
        if (budget) {
          // Past the value limit items are counted, not decoded.
          if (depth === 0) budget.topItems += items.length;
          const kept = Math.max(0, Math.min(items.length, budget.itemsLeft));
          budget.itemsLeft -= items.length;
          budget.charge(COST.array + COST.slot * kept);
          arr = new Array(kept);
          for (let i = 0; i < kept; i++) {
            try {
              arr[i] = anyFromJson(items[i], depth + 1, budget);
            } catch (err) {
              throw within(err, `arrayValue.values[${i}]`);
            }
          }
        } else {
          arr = new Array(items.length);
          for (let i = 0; i < items.length; i++) {
            try {
              arr[i] = anyFromJson(items[i], depth + 1, budget);
            } catch (err) {
              throw within(err, `arrayValue.values[${i}]`);
            }
          }
        }
        value = arr;
        break;
      }
      case 'kvlistValue':
      case 'kvlist_value':
        if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad('', `values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
        value = attrsFromJson(object(x, 'kvlistValue').values, depth + 1, 'kvlistValue.values', budget);
        break;
      default:
        continue;
    }
    if (kind !== '') throw new Bad('', `an AnyValue holds one value, got both ${kind} and ${key}`);
    kind = key;
    out = value;
  }
  return out;
}

export function encodeOtlpJson(request: OtlpTraceRequest): string {
  return JSON.stringify({
    resourceSpans: request.resourceSpans.map((rs) => ({
      resource: { attributes: attrsToJson(rs.resource, 0) },
      scopeSpans: rs.scopeSpans.map((ss) => ({
        scope: { name: ss.scope.name, version: ss.scope.version },
        spans: ss.spans.map(spanToJson),
      })),
    })),
  });
}

function spanToJson(s: OtlpSpan): Json {
  const span: Json = {
    traceId: encodeHex(s.traceId, 'traceId'),
    spanId: encodeHex(s.spanId, 'spanId'),
  };
  if (s.parentSpanId !== '') span.parentSpanId = encodeHex(s.parentSpanId, 'parentSpanId');
  span.name = s.name;
  span.kind = s.kind;
  span.startTimeUnixNano = encodeUint64(s.startTimeUnixNano, 'startTimeUnixNano');
  span.endTimeUnixNano = encodeUint64(s.endTimeUnixNano, 'endTimeUnixNano');
  span.attributes = attrsToJson(s.attributes, 0);
  span.status = s.statusMessage === '' ? { code: s.statusCode } : { code: s.statusCode, message: s.statusMessage };
  return span;
}

function encodeHex(v: string, field: string): string {
  try {
    return hexId(v, field);
  } catch (err) {
    if (err instanceof Bad) throw new InputError(`json: ${field}: ${err.message}`);
    throw err;
  }
}

function encodeUint64(v: bigint, field: string): string {
  if (typeof v !== 'bigint' || v < 0n || v > UINT64_MAX)
    throw new InputError(`json: ${field}: expected a bigint in [0, 2^64), got ${String(v)}`);
  return v.toString();
}

function attrsToJson(map: AttrMap, depth: number): Json[] {
  const out: Json[] = [];
  for (const key of Object.keys(map)) out.push({ key, value: anyToJson(map[key]!, depth, key) });
  return out;
}

function anyToJson(v: AttrValue, depth: number, key: string): Json {
  switch (typeof v) {
    case 'string':
      return { stringValue: v };
    case 'boolean':
      return { boolValue: v };
    case 'number':
      // Integral values that fit int64 go as ints (decimal strings); the rest as doubles, non-finite ones spelled out.
      if (Number.isSafeInteger(v)) return { intValue: String(v) };
      if (Number.isInteger(v) && Math.abs(v) < 2 ** 63) return { intValue: BigInt(v).toString() };
      return { doubleValue: Number.isFinite(v) ? v : String(v) };
    case 'bigint':
      if (v < INT64_MIN || v > INT64_MAX) throw new InputError(`json: attribute ${JSON.stringify(key)}: ${v} does not fit int64`);
      return { intValue: v.toString() };
  }
  if (v === null) return {};
  if (v instanceof Uint8Array) return { bytesValue: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') };
  if (depth >= MAX_ANY_VALUE_DEPTH) {
    throw new InputError(`json: attribute ${JSON.stringify(key)}: values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
  }
  if (Array.isArray(v)) return { arrayValue: { values: v.map((item) => anyToJson(item, depth + 1, key)) } };
  if (typeof v === 'object') return { kvlistValue: { values: attrsToJson(v, depth + 1) } };
  throw new InputError(`json: attribute ${JSON.stringify(key)}: cannot encode a ${typeof v}`);
}
