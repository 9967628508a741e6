/**
 * OTLP/HTTP JSON codec for traces, per the OTLP JSON mapping: lowerCamelCase keys (snake_case accepted, as
 * protojson does), trace/span ids as hex (not base64), 64-bit integers as decimal strings (numbers accepted),
 * enums as integers (names accepted), bytes as base64.
 */
import { InputError } from '../common/errors.ts';
import type { AttrMap, AttrValue, OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import { MAX_ANY_VALUE_DEPTH } from './otlp-proto.ts';

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
  let doc = body;
  if (typeof body === 'string' || body instanceof Uint8Array) {
    const text = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new InputError(`json: not valid JSON: ${(err as Error).message}`, { cause: err });
    }
  }
  try {
    return requestFromJson(doc);
  } catch (err) {
    if (err instanceof Bad) throw new InputError(`json: ${err.path === '' ? '' : `${err.path}: `}${err.message}`);
    // Exotic (non-JSON) objects can still make property access throw; that is bad input too.
    throw new InputError(`json: cannot decode request: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

function requestFromJson(doc: unknown): OtlpTraceRequest {
  const o = object(doc, '');
  const items = list(o.resourceSpans ?? o.resource_spans, 'resourceSpans');
  const resourceSpans: OtlpResourceSpans[] = new Array(items.length);
  for (let i = 0; i < items.length; i++) {
    try {
      resourceSpans[i] = resourceSpansFromJson(object(items[i], ''));
    } catch (err) {
      throw within(err, `resourceSpans[${i}]`);
    }
  }
  return { resourceSpans };
}

function resourceSpansFromJson(o: Json): OtlpResourceSpans {
  let resource: AttrMap = Object.create(null);
  if (o.resource != null) resource = attrsFromJson(object(o.resource, 'resource').attributes, 0, 'resource.attributes');
  const items = list(o.scopeSpans ?? o.scope_spans, 'scopeSpans');
  const scopeSpans: OtlpScopeSpans[] = new Array(items.length);
  for (let j = 0; j < items.length; j++) {
    try {
      scopeSpans[j] = scopeSpansFromJson(object(items[j], ''));
    } catch (err) {
      throw within(err, `scopeSpans[${j}]`);
    }
  }
  return { resource, scopeSpans };
}

function scopeSpansFromJson(o: Json): OtlpScopeSpans {
  const scope = { name: '', version: '' };
  if (o.scope != null) {
    const s = object(o.scope, 'scope');
    scope.name = str(s.name, 'scope.name');
    scope.version = str(s.version, 'scope.version');
  }
  const items = list(o.spans, 'spans');
  const spans: OtlpSpan[] = new Array(items.length);
  for (let k = 0; k < items.length; k++) {
    try {
      spans[k] = spanFromJson(object(items[k], ''));
    } catch (err) {
      throw within(err, `spans[${k}]`);
    }
  }
  return { scope, spans };
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

function spanFromJson(o: Json): OtlpSpan {
  const span: OtlpSpan = {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startTimeUnixNano: 0n,
    endTimeUnixNano: 0n,
    attributes: Object.create(null),
    statusCode: 0,
    statusMessage: '',
  };
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
        span.startTimeUnixNano = uint64(v, 'startTimeUnixNano');
        break;
      case 'endTimeUnixNano':
      case 'end_time_unix_nano':
        span.endTimeUnixNano = uint64(v, 'endTimeUnixNano');
        break;
      case 'attributes':
        span.attributes = attrsFromJson(v, 0, 'attributes');
        break;
      case 'status': {
        const s = object(v, 'status');
        span.statusCode = s.code == null ? 0 : enumValue(s.code, STATUS_CODES, 'status.code');
        span.statusMessage = str(s.message, 'status.message');
        break;
      }
    }
  }
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

function uint64(v: unknown, path: string): bigint {
  let n: bigint | undefined;
  if (typeof v === 'string' && isDecimal(v, false)) n = BigInt(v);
  else if (typeof v === 'number' && Number.isInteger(v)) n = BigInt(v);
  if (n === undefined) throw new Bad(path, `expected a decimal string or integer, got ${describe(v)}`);
  if (n < 0n || n > UINT64_MAX) throw new Bad(path, `${v} is outside the uint64 range`);
  return n;
}

/** int64 -> number when it is a safe integer, else an exact bigint. */
function int64(v: unknown, path: string): number | bigint {
  if (typeof v === 'number' && Number.isSafeInteger(v)) return v + 0; // + 0 turns -0 into 0
  let n: bigint | undefined;
  if (typeof v === 'string' && isDecimal(v, true)) {
    if (v.length <= 15) return Number(v) + 0;
    n = BigInt(v);
  } else if (typeof v === 'number' && Number.isInteger(v)) n = BigInt(v);
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
      (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2f || c === 0x2d || c === 0x5f || c === 0x3d;
    if (!ok) throw new Bad(path, `expected a base64 string, got ${describe(v)}`);
  }
  return Uint8Array.from(Buffer.from(v, 'base64'));
}

function attrsFromJson(v: unknown, depth: number, path: string): AttrMap {
  const items = list(v, path);
  // A null prototype keeps keys such as `__proto__` and `constructor` plain data.
  const map: AttrMap = Object.create(null);
  for (let i = 0; i < items.length; i++) {
    const kv = object(items[i], `${path}[${i}]`);
    const key = str(kv.key, `${path}[${i}].key`);
    try {
      map[key] = anyFromJson(kv.value, depth);
    } catch (err) {
      throw within(err, `${path}[${JSON.stringify(key)}]`);
    }
  }
  return map;
}

function anyFromJson(v: unknown, depth: number): AttrValue {
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
        break;
      case 'doubleValue':
      case 'double_value':
        value = double(x, 'doubleValue');
        break;
      case 'bytesValue':
      case 'bytes_value':
        value = base64(x, 'bytesValue');
        break;
      case 'arrayValue':
      case 'array_value': {
        if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad('', `values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
        const items = list(object(x, 'arrayValue').values, 'arrayValue.values');
        const arr: AttrValue[] = new Array(items.length);
        for (let i = 0; i < items.length; i++) {
          try {
            arr[i] = anyFromJson(items[i], depth + 1);
          } catch (err) {
            throw within(err, `arrayValue.values[${i}]`);
          }
        }
        value = arr;
        break;
      }
      case 'kvlistValue':
      case 'kvlist_value':
        if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad('', `values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
        value = attrsFromJson(object(x, 'kvlistValue').values, depth + 1, 'kvlistValue.values');
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
  if (typeof v !== 'bigint' || v < 0n || v > UINT64_MAX) throw new InputError(`json: ${field}: expected a bigint in [0, 2^64), got ${String(v)}`);
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
