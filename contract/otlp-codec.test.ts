import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { InputError } from '../common/errors.ts';
import { decodeOtlpJson, encodeOtlpJson } from './otlp-json.ts';
import type { AttrMap, AttrValue, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import { decodeOtlpProtobuf } from './otlp-decode.ts';
import { encodeOtlpProtobuf } from './otlp-encode.ts';

/** AttrMaps come back with a null prototype; build expectations the same way (own `__proto__` keys included). */
function attrs(entries: Record<string, AttrValue>): AttrMap {
  const map: AttrMap = Object.create(null);
  for (const [k, v] of Object.entries(entries)) map[k] = v;
  return map;
}

function span(overrides: Partial<OtlpSpan> = {}): OtlpSpan {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    parentSpanId: '',
    name: 'pd.kv.hold',
    kind: 1,
    startTimeUnixNano: 1700000000123456789n,
    endTimeUnixNano: 1700000000987654321n,
    attributes: attrs({}),
    statusCode: 0,
    statusMessage: '',
    ...overrides,
  };
}

const EVERY_KIND = attrs({
  str: 'text',
  empty: '',
  yes: true,
  no: false,
  zero: 0,
  int: -42,
  maxSafe: Number.MAX_SAFE_INTEGER,
  big: 2n ** 53n + 1n,
  int64Max: 2n ** 63n - 1n,
  int64Min: -(2n ** 63n),
  double: 1.5,
  nan: NaN,
  inf: -Infinity,
  bytes: new Uint8Array([0, 1, 254, 255]),
  nothing: null,
  array: [1, 'two', true, null, [2.5, []]],
  kvlist: attrs({ inner: 'x', nested: attrs({ deep: [1n << 60n] }) }),
  ['__proto__']: 'not a prototype',
  constructor: 7,
});

const SAMPLE: OtlpTraceRequest = {
  resourceSpans: [
    {
      resource: attrs({ 'service.name': 'engine', 'pd.cluster': 'c1' }),
      scopeSpans: [
        {
          scope: { name: 'holdscope', version: '0.1.0' },
          spans: [
            span({ attributes: EVERY_KIND, statusCode: 2, statusMessage: 'boom' }),
            span({ spanId: '00000000000000ff', parentSpanId: 'b7ad6b7169203331', kind: 3, endTimeUnixNano: 2n ** 64n - 1n }),
          ],
        },
        { scope: { name: '', version: '' }, spans: [] },
      ],
    },
    { resource: attrs({}), scopeSpans: [] },
  ],
};

function assertInputError(fn: () => unknown, message?: RegExp | string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof InputError, `expected InputError, got ${String(err)}`);
    if (typeof message === 'string') assert.equal(err.message, message);
    else if (message) assert.match(err.message, message);
    return true;
  });
}

/** Decoding must either succeed or fail with InputError; any other error type is a bug. */
function decodesOrRejects(fn: () => unknown): boolean {
  try {
    fn();
    return true;
  } catch (err) {
    if (!(err instanceof InputError)) throw new Error(`escaped a non-InputError: ${String(err)}`, { cause: err });
    return false;
  }
}

function mulberry32(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('OTLP protobuf codec', () => {
  it('round-trips every AnyValue kind, exact 64-bit timestamps and ints', () => {
    const decoded = decodeOtlpProtobuf(encodeOtlpProtobuf(SAMPLE));
    assert.deepEqual(decoded, SAMPLE);
    const attributes = decoded.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    assert.equal(attributes.big, 9007199254740993n);
    assert.equal(attributes.maxSafe, 9007199254740991);
    assert.equal(decoded.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.startTimeUnixNano, 1700000000123456789n);
  });

  it('encodes integral numbers as int_value and unsafe ones back as exact bigints', () => {
    const request = { resourceSpans: [{ resource: attrs({ a: 2 ** 60, b: 2.0, c: 1e300 }), scopeSpans: [] }] };
    assert.deepEqual(decodeOtlpProtobuf(encodeOtlpProtobuf(request)).resourceSpans[0]!.resource, attrs({ a: 2n ** 60n, b: 2, c: 1e300 }));
  });

  it('decodes an empty body as an empty request', () => {
    assert.deepEqual(decodeOtlpProtobuf(new Uint8Array(0)), { resourceSpans: [] });
  });

  it('keeps __proto__ and constructor attribute keys as data', () => {
    const attributes = decodeOtlpProtobuf(encodeOtlpProtobuf(SAMPLE)).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    assert.equal(Object.getPrototypeOf(attributes), null);
    assert.equal(attributes['__proto__'], 'not a prototype');
    assert.equal(attributes.constructor, 7);
    assert.equal(({} as Record<string, unknown>).constructor, Object);
  });

  it('names the wire problem', () => {
    assertInputError(() => decodeOtlpProtobuf(new Uint8Array([0x0f])), /^protobuf: invalid wire type 7 at offset \d+/);
    assertInputError(() => decodeOtlpProtobuf(new Uint8Array([0x0a, 0x05, 0x00])), /^protobuf: truncated or malformed message/);
  });

  it('refuses ids that are not hex and bigints out of range when encoding', () => {
    assertInputError(() => encodeOtlpProtobuf(oneSpan(span({ traceId: 'xyz' }))), /traceId: not a hex string/);
    assertInputError(() => encodeOtlpProtobuf(oneSpan(span({ startTimeUnixNano: -1n }))), /startTimeUnixNano/);
    assertInputError(() => encodeOtlpProtobuf(oneSpan(span({ attributes: attrs({ x: 2n ** 63n }) }))), /does not fit int64/);
  });
});

describe('protobuf varints and fixed64, as the wire may carry them', () => {
  const varint = (v: bigint): Buffer => {
    const out: number[] = [];
    for (let u = BigInt.asUintN(64, v); ; u >>= 7n) {
      if (u < 0x80n) return Buffer.from([...out, Number(u)]);
      out.push(Number(u & 0x7fn) | 0x80);
    }
  };
  const ld = (field: number, payload: Buffer): Buffer =>
    Buffer.concat([Buffer.from([(field << 3) | 2]), varint(BigInt(payload.length)), payload]);
  /** A request of one span named `pd.x` whose other fields are `fields`, as bytes. */
  const request = (fields: Buffer): Buffer => ld(1, ld(2, ld(2, Buffer.concat([ld(5, Buffer.from('pd.x')), fields]))));
  const decodeSpan = (fields: Buffer): OtlpSpan => decodeOtlpProtobuf(request(fields)).resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
  const anyValue = (any: Buffer): AttrValue => decodeSpan(ld(9, Buffer.concat([ld(1, Buffer.from('v')), ld(2, any)]))).attributes.v!;

  it('reads int_value of every length exactly: a number when safe, else a bigint', () => {
    const safe = [0, 1, 127, 128, 2 ** 28 - 1, 2 ** 28, 2 ** 31, 2 ** 32, 2 ** 53 - 1, -1, -(2 ** 31), -(2 ** 53 - 1)];
    for (const n of safe) assert.equal(anyValue(Buffer.concat([Buffer.from([0x18]), varint(BigInt(n))])), n);
    for (const n of [2n ** 53n, 2n ** 63n - 1n, -(2n ** 53n), -(2n ** 63n)])
      assert.equal(anyValue(Buffer.concat([Buffer.from([0x18]), varint(n)])), n);
  });

  it('reads bool_value from all 64 bits, and non-canonical varints by their value', () => {
    assert.equal(anyValue(Buffer.from('1080808080808080808001', 'hex')), true); // only bit 63
    assert.equal(anyValue(Buffer.from('1080808080808080808002', 'hex')), false); // only a bit past 64
    assert.equal(anyValue(Buffer.from('108000', 'hex')), false);
    assert.equal(decodeSpan(Buffer.from('30818080808000', 'hex')).kind, 1); // kind 1 in six bytes
    assert.equal(decodeSpan(Buffer.from('30ffffffffffffffffff01', 'hex')).kind, -1);
  });

  it('reads fixed64 times exactly past 2^53', () => {
    const fixed64 = (field: number, v: bigint) => {
      const b = Buffer.alloc(9);
      b[0] = (field << 3) | 1;
      b.writeBigUInt64LE(v, 1);
      return b;
    };
    const span = decodeSpan(Buffer.concat([fixed64(7, 2n ** 53n + 1n), fixed64(8, 2n ** 64n - 1n)]));
    assert.equal(span.startTimeUnixNano, 2n ** 53n + 1n);
    assert.equal(span.endTimeUnixNano, 2n ** 64n - 1n);
  });

  it('reads nothing past the end of the enclosing message, and no varint longer than 10 bytes', () => {
    // A status whose length ends inside its code's varint, the next byte of the span completing it.
    assertInputError(() => decodeSpan(Buffer.from('7a021881' + '01', 'hex')), /^protobuf: truncated or malformed message/);
    assertInputError(
      () => decodeSpan(Buffer.concat([ld(1, Buffer.alloc(15)).subarray(0, 10)])),
      /^protobuf: truncated or malformed message/,
    );
    assertInputError(() => decodeSpan(Buffer.from('58ffffffffffffffffffff01', 'hex')), 'protobuf: invalid varint encoding');
    assertInputError(() => decodeSpan(Buffer.from('39000000', 'hex')), /^protobuf: truncated or malformed message/);
  });
});

function oneSpan(s: OtlpSpan): OtlpTraceRequest {
  return { resourceSpans: [{ resource: attrs({}), scopeSpans: [{ scope: { name: 's', version: '' }, spans: [s] }] }] };
}

describe('OTLP JSON codec', () => {
  it('round-trips every AnyValue kind', () => {
    assert.deepEqual(decodeOtlpJson(encodeOtlpJson(SAMPLE)), SAMPLE);
  });

  it('writes ids as hex, int64 as decimal strings, enums as integers', () => {
    const text = encodeOtlpJson(SAMPLE);
    assert.match(text, /"traceId":"0af7651916cd43dd8448eb211c80319c"/);
    assert.match(text, /"startTimeUnixNano":"1700000000123456789"/);
    assert.match(text, /"endTimeUnixNano":"18446744073709551615"/);
    assert.match(text, /"key":"big","value":\{"intValue":"9007199254740993"\}/);
    assert.match(text, /"key":"int","value":\{"intValue":"-42"\}/);
    assert.match(text, /"key":"nan","value":\{"doubleValue":"NaN"\}/);
    assert.match(text, /"key":"bytes","value":\{"bytesValue":"AAH\+\/w=="\}/);
    assert.match(text, /"kind":3/);
    assert.match(text, /"status":\{"code":2,"message":"boom"\}/);
  });

  it('accepts snake_case keys, numeric int64, enum names and upper-case hex', () => {
    const decoded = decodeOtlpJson({
      resource_spans: [
        {
          resource: { attributes: [{ key: 'n', value: { int_value: 5 } }] },
          scope_spans: [
            {
              scope: { name: 's' },
              spans: [
                {
                  trace_id: '0AF7651916CD43DD8448EB211C80319C',
                  span_id: 'b7ad6b7169203331',
                  parent_span_id: '',
                  name: 'x',
                  kind: 'SPAN_KIND_CLIENT',
                  start_time_unix_nano: 1700000000,
                  end_time_unix_nano: '1700000000123456789',
                  attributes: [
                    { key: 's', value: { string_value: 'v' } },
                    { key: 'd', value: { double_value: 'Infinity' } },
                    { key: 'b', value: { bytes_value: '_-8=' } },
                    { key: 'a', value: { array_value: { values: [{ bool_value: false }, { int_value: '-9223372036854775808' }] } } },
                    { key: 'k', value: { kvlist_value: { values: [{ key: 'i', value: {} }] } } },
                    { key: 'none' },
                  ],
                  status: { code: 'STATUS_CODE_ERROR', message: 'm' },
                  events: [{ name: 'ignored' }],
                },
              ],
            },
          ],
        },
      ],
    });
    assert.deepEqual(decoded, {
      resourceSpans: [
        {
          resource: attrs({ n: 5 }),
          scopeSpans: [
            {
              scope: { name: 's', version: '' },
              spans: [
                span({
                  name: 'x',
                  kind: 3,
                  startTimeUnixNano: 1700000000n,
                  endTimeUnixNano: 1700000000123456789n,
                  attributes: attrs({
                    s: 'v',
                    d: Infinity,
                    b: new Uint8Array([0xff, 0xef]),
                    a: [false, -(2n ** 63n)],
                    k: attrs({ i: null }),
                    none: null,
                  }),
                  statusCode: 2,
                  statusMessage: 'm',
                }),
              ],
            },
          ],
        },
      ],
    });
  });

  it('keeps __proto__ and constructor attribute keys as data', () => {
    const decoded = decodeOtlpJson(
      '{"resourceSpans":[{"resource":{"attributes":[{"key":"__proto__","value":{"stringValue":"p"}},{"key":"constructor","value":{"intValue":"1"}}]}}]}',
    );
    const resource = decoded.resourceSpans[0]!.resource;
    assert.equal(Object.getPrototypeOf(resource), null);
    assert.equal(resource['__proto__'], 'p');
    assert.equal(resource.constructor, 1);
    assert.equal(({} as Record<string, unknown>).constructor, Object);
  });

  it('says where a value has the wrong type', () => {
    const filler = { spans: [] };
    const bad = { resourceSpans: [{ scopeSpans: [filler, { spans: [{}, {}, {}, { startTimeUnixNano: true }] }] }] };
    assertInputError(
      () => decodeOtlpJson(JSON.stringify(bad)),
      'json: resourceSpans[0].scopeSpans[1].spans[3].startTimeUnixNano: expected a decimal string or integer, got true',
    );
    const badAttr = {
      resourceSpans: [
        { scopeSpans: [{ spans: [{ attributes: [{ key: 'k', value: { arrayValue: { values: [{}, { intValue: '1.5' }] } } }] }] }] },
      ],
    };
    assertInputError(
      () => decodeOtlpJson(badAttr),
      'json: resourceSpans[0].scopeSpans[0].spans[0].attributes["k"].arrayValue.values[1].intValue: expected a decimal string or integer, got "1.5"',
    );
  });

  const wrong: [string, unknown, RegExp][] = [
    ['invalid JSON', '{"resourceSpans":', /^json: not valid JSON/],
    ['a top-level array', '[]', /^json: expected an object, got an array/],
    ['a top-level null', 'null', /^json: expected an object, got null/],
    ['resourceSpans not an array', { resourceSpans: {} }, /^json: resourceSpans: expected an array/],
    ['a resourceSpans entry not an object', { resourceSpans: [1] }, /^json: resourceSpans\[0\]: expected an object, got 1/],
    ['spans not an array', { resourceSpans: [{ scopeSpans: [{ spans: 'x' }] }] }, /spans: expected an array/],
    [
      'a base64 trace id',
      { resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: 'CvdlGRbNQ92ESOshHIAxnA==' }] }] }] },
      /traceId: expected a hex string \(OTLP\/JSON ids are hex/,
    ],
    ['an odd-length span id', { resourceSpans: [{ scopeSpans: [{ spans: [{ spanId: 'abc' }] }] }] }, /spanId: expected an even number/],
    [
      'a negative timestamp',
      { resourceSpans: [{ scopeSpans: [{ spans: [{ endTimeUnixNano: '-1' }] }] }] },
      /endTimeUnixNano: expected a decimal string/,
    ],
    [
      'a timestamp beyond uint64',
      { resourceSpans: [{ scopeSpans: [{ spans: [{ endTimeUnixNano: '18446744073709551616' }] }] }] },
      /outside the uint64 range/,
    ],
    ['a float kind', { resourceSpans: [{ scopeSpans: [{ spans: [{ kind: 1.5 }] }] }] }, /kind: expected an integer enum value, got 1.5/],
    [
      'an unknown kind name',
      { resourceSpans: [{ scopeSpans: [{ spans: [{ kind: 'SERVER' }] }] }] },
      /kind: expected an integer enum value/,
    ],
    ['a non-string name', { resourceSpans: [{ scopeSpans: [{ spans: [{ name: 5 }] }] }] }, /name: expected a string, got 5/],
    ['attributes not an array', { resourceSpans: [{ resource: { attributes: {} } }] }, /resource\.attributes: expected an array/],
    [
      'a non-string key',
      { resourceSpans: [{ resource: { attributes: [{ key: 1 }] } }] },
      /resource\.attributes\[0\]\.key: expected a string/,
    ],
    ['an AnyValue that is a string', attrDoc('plain'), /attributes\["k"\]: expected an object/],
    ['an AnyValue with two kinds', attrDoc({ stringValue: 'a', boolValue: true }), /holds one value, got both stringValue and boolValue/],
    ['a quoted bool', attrDoc({ boolValue: 'true' }), /boolValue: expected true or false/],
    ['a numeric stringValue', attrDoc({ stringValue: 5 }), /stringValue: expected a string, got 5/],
    ['a fractional intValue', attrDoc({ intValue: 1.5 }), /intValue: expected a decimal string or integer, got 1.5/],
    ['an intValue beyond int64', attrDoc({ intValue: '9223372036854775808' }), /outside the int64 range/],
    ['a hex intValue', attrDoc({ intValue: '0x10' }), /intValue: expected a decimal string/],
    ['a non-numeric doubleValue', attrDoc({ doubleValue: 'fast' }), /doubleValue: expected a number/],
    ['bad base64', attrDoc({ bytesValue: 'a b!' }), /bytesValue: expected a base64 string/],
    ['arrayValue not an object', attrDoc({ arrayValue: [1] }), /arrayValue: expected an object, got an array/],
  ];
  for (const [what, body, message] of wrong) {
    it(`rejects ${what}`, () => assertInputError(() => decodeOtlpJson(body), message));
  }

  it('survives random corruption of a valid document', () => {
    const random = mulberry32(7);
    const junk: unknown[] = [null, true, 0, -1, 1.5, '', 'zz', '12', [], {}, [{}], { values: 1 }];
    const base = JSON.parse(encodeOtlpJson(SAMPLE)) as unknown;
    let rejected = 0;
    for (let n = 0; n < 2000; n++) {
      const doc = structuredClone(base);
      // Replace one randomly chosen node anywhere in the tree.
      const nodes: [Record<string, unknown>, string][] = [];
      const walk = (v: unknown): void => {
        if (!v || typeof v !== 'object') return;
        for (const k of Object.keys(v)) {
          nodes.push([v as Record<string, unknown>, k]);
          walk((v as Record<string, unknown>)[k]);
        }
      };
      walk(doc);
      const [parent, key] = nodes[Math.floor(random() * nodes.length)]!;
      parent[key] = junk[Math.floor(random() * junk.length)];
      if (!decodesOrRejects(() => decodeOtlpJson(doc))) rejected++;
    }
    assert.ok(rejected > 100, `only ${rejected} corruptions rejected`);
  });
});

function attrDoc(value: unknown): unknown {
  return { resourceSpans: [{ scopeSpans: [{ spans: [{ attributes: [{ key: 'k', value }] }] }] }] };
}

describe('nesting depth', () => {
  const nested = (levels: number, kind: 'array' | 'kvlist'): AttrValue => {
    let v: AttrValue = 'leaf';
    for (let i = 0; i < levels; i++) v = kind === 'array' ? [v] : attrs({ k: v });
    return v;
  };

  for (const kind of ['array', 'kvlist'] as const) {
    it(`accepts 16 levels of ${kind} and rejects 17, in both encodings`, () => {
      const ok = oneSpan(span({ attributes: attrs({ deep: nested(16, kind) }) }));
      assert.deepEqual(decodeOtlpProtobuf(encodeOtlpProtobuf(ok)), ok);
      assert.deepEqual(decodeOtlpJson(encodeOtlpJson(ok)), ok);
      const tooDeep = oneSpan(span({ attributes: attrs({ deep: nested(17, kind) }) }));
      assertInputError(() => encodeOtlpProtobuf(tooDeep), /nested deeper than 16/);
      assertInputError(() => encodeOtlpJson(tooDeep), /nested deeper than 16/);
    });
  }

  it('rejects a cyclic value when encoding', () => {
    const cycle: AttrValue[] = [];
    cycle.push(cycle);
    assertInputError(() => encodeOtlpProtobuf(oneSpan(span({ attributes: attrs({ c: cycle }) }))), /nested deeper/);
    assertInputError(() => encodeOtlpJson(oneSpan(span({ attributes: attrs({ c: cycle }) }))), /nested deeper/);
  });

  it('rejects deep protobuf nesting, moderate and hostile, without a stack overflow', () => {
    const path = 'protobuf: resourceSpans[0].scopeSpans[0].spans[0].attributes["k"]: values nested deeper than 16 levels';
    assertInputError(() => decodeOtlpProtobuf(deepProtobuf(17)), path);
    assert.doesNotThrow(() => decodeOtlpProtobuf(deepProtobuf(16)));
    assertInputError(() => decodeOtlpProtobuf(deepProtobuf(40)), /nested deeper than 16|max depth/);
    // The decoder stops at level 17 however deep the body goes, so the hostile case says the same as the moderate one.
    assertInputError(() => decodeOtlpProtobuf(deepProtobuf(200_000)), /nested deeper than 16|max depth|too deep/);
  });

  it('rejects deep JSON nesting, moderate and hostile', () => {
    for (const levels of [17, 200_000]) {
      const value = '{"arrayValue":{"values":['.repeat(levels) + '{}' + ']}}'.repeat(levels);
      const body = `{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":${value}}]}]}]}]}`;
      assertInputError(() => decodeOtlpJson(body), /attributes\["k"\](\.arrayValue\.values\[0\])*: values nested deeper than 16 levels$/);
    }
  });
});

/** Bytes of a request whose one span has attribute "k" = `levels` nested arrays, built without recursion. */
function deepProtobuf(levels: number): Uint8Array {
  // Lengths inside-out: an AnyValue wraps an ArrayValue (field 5), which wraps an AnyValue (field 1).
  const lengths: number[] = [0];
  for (let i = 0; i < levels; i++) {
    const arrayValue = 1 + varintLength(lengths[lengths.length - 1]!) + lengths[lengths.length - 1]!;
    lengths.push(1 + varintLength(arrayValue) + arrayValue);
  }
  const bytes: number[] = [];
  for (let i = levels; i > 0; i--) {
    const arrayValue = 1 + varintLength(lengths[i - 1]!) + lengths[i - 1]!;
    bytes.push(0x2a, ...varint(arrayValue), 0x0a, ...varint(lengths[i - 1]!));
  }
  const anyValue = Uint8Array.from(bytes);
  const keyValue = Buffer.concat([Buffer.from([0x0a, 0x01, 0x6b, 0x12]), Buffer.from(varint(anyValue.length)), anyValue]);
  const wrap = (field: number, inner: Uint8Array): Buffer =>
    Buffer.concat([Buffer.from([(field << 3) | 2, ...varint(inner.length)]), inner]);
  return wrap(1, wrap(2, wrap(2, wrap(9, keyValue))));
}

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

function varintLength(n: number): number {
  return varint(n).length;
}

describe('malformed protobuf', () => {
  it('turns random bytes into a decoded request or an InputError, never another error', () => {
    const random = mulberry32(42);
    let rejected = 0;
    for (let n = 0; n < 5000; n++) {
      const body = new Uint8Array(Math.floor(random() * 256));
      for (let i = 0; i < body.length; i++) body[i] = Math.floor(random() * 256);
      if (!decodesOrRejects(() => decodeOtlpProtobuf(body))) rejected++;
    }
    assert.ok(rejected > 2500, `only ${rejected} of 5000 random bodies rejected`);
  });

  it('survives random byte flips in a valid body', () => {
    const random = mulberry32(1);
    const valid = encodeOtlpProtobuf(SAMPLE);
    for (let n = 0; n < 3000; n++) {
      const body = Uint8Array.from(valid);
      for (let flips = 1 + Math.floor(random() * 3); flips > 0; flips--)
        body[Math.floor(random() * body.length)] = Math.floor(random() * 256);
      decodesOrRejects(() => decodeOtlpProtobuf(body));
    }
  });

  it('decodes or rejects every prefix of a valid message', () => {
    const valid = encodeOtlpProtobuf(SAMPLE);
    let rejected = 0;
    for (let len = 0; len < valid.length; len++) if (!decodesOrRejects(() => decodeOtlpProtobuf(valid.subarray(0, len)))) rejected++;
    assert.ok(rejected > valid.length / 2, `only ${rejected} of ${valid.length} prefixes rejected`);
    assert.deepEqual(decodeOtlpProtobuf(valid), SAMPLE);
  });
});

describe('bodies from the OpenTelemetry JS exporter', () => {
  const START = 1700000000123456789n;
  const END = 1700000001987654321n;

  async function exportedSpans(): Promise<ReadableSpan[]> {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'engine', 'pd.cluster': 'c1' }),
      spanProcessors: [new SimpleSpanProcessor({ exporter })],
    });
    const tracer = provider.getTracer('holdscope-test', '1.2.3');
    const parent = tracer.startSpan('pd.request', { kind: SpanKind.SERVER, startTime: [1700000000, 123456789] });
    const child = tracer.startSpan(
      'pd.kv.hold',
      {
        kind: SpanKind.INTERNAL,
        startTime: [1700000000, 123456789],
        attributes: { 'pd.pages': [1, 2, 3], 'pd.roles': ['prefill', 'decode'], 'pd.ok': true, 'pd.count': 42, 'pd.ratio': 0.25 },
        links: [{ context: parent.spanContext(), attributes: { why: 'follows' } }],
      },
      trace.setSpan(context.active(), parent),
    );
    child.addEvent('pd.evicted', { 'pd.page': 7 }, [1700000001, 0]);
    child.setStatus({ code: 2, message: 'evicted' });
    child.end([1700000001, 987654321]);
    parent.end([1700000001, 987654321]);
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    await provider.shutdown(); // also empties the in-memory exporter, so only after reading it
    return spans;
  }

  function check(request: OtlpTraceRequest, spans: ReadableSpan[]): void {
    assert.equal(request.resourceSpans.length, 1);
    const rs = request.resourceSpans[0]!;
    assert.equal(rs.resource['service.name'], 'engine');
    assert.equal(rs.resource['pd.cluster'], 'c1');
    assert.deepEqual(rs.scopeSpans[0]!.scope, { name: 'holdscope-test', version: '1.2.3' });
    const decoded = rs.scopeSpans[0]!.spans;
    const child = decoded.find((s) => s.name === 'pd.kv.hold')!;
    const parent = decoded.find((s) => s.name === 'pd.request')!;
    const sdkChild = spans.find((s) => s.name === 'pd.kv.hold')!;
    assert.equal(child.traceId, sdkChild.spanContext().traceId);
    assert.match(child.traceId, /^[0-9a-f]{32}$/);
    assert.equal(child.spanId, sdkChild.spanContext().spanId);
    assert.equal(child.parentSpanId, parent.spanId);
    assert.equal(parent.parentSpanId, '');
    assert.equal(child.kind, 1); // OTLP SPAN_KIND_INTERNAL
    assert.equal(parent.kind, 2); // OTLP SPAN_KIND_SERVER
    assert.equal(child.startTimeUnixNano, START);
    assert.equal(child.endTimeUnixNano, END);
    assert.deepEqual(
      child.attributes,
      attrs({ 'pd.pages': [1, 2, 3], 'pd.roles': ['prefill', 'decode'], 'pd.ok': true, 'pd.count': 42, 'pd.ratio': 0.25 }),
    );
    assert.equal(child.statusCode, 2);
    assert.equal(child.statusMessage, 'evicted');
  }

  it('decodes the protobuf serializer output, events and links included', async () => {
    const spans = await exportedSpans();
    const body = ProtobufTraceSerializer.serializeRequest(spans)!;
    const request = decodeOtlpProtobuf(body);
    check(request, spans);
    // Our encoding re-reads the same, and writes the scalar fields byte for byte as the OTel serializer does.
    assert.deepEqual(decodeOtlpProtobuf(encodeOtlpProtobuf(request)), request);
    const ours = Buffer.from(encodeOtlpProtobuf(request)).toString('hex');
    const theirs = Buffer.from(body).toString('hex');
    const child = request.resourceSpans[0]!.scopeSpans[0]!.spans.find((s) => s.name === 'pd.kv.hold')!;
    const le64 = (n: bigint): string => {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(n);
      return b.toString('hex');
    };
    for (const field of [
      `0a10${child.traceId}`,
      `1208${child.spanId}`,
      `2208${child.parentSpanId}`,
      `39${le64(START)}`,
      `41${le64(END)}`,
      '2a0a70642e6b762e686f6c64',
    ]) {
      assert.ok(theirs.includes(field), `OTel body lacks ${field}`);
      assert.ok(ours.includes(field), `our body lacks ${field}`);
    }
  });

  it('decodes the JSON serializer output', async () => {
    const spans = await exportedSpans();
    const body = JsonTraceSerializer.serializeRequest(spans)!;
    check(decodeOtlpJson(new TextDecoder().decode(body)), spans);
    check(decodeOtlpJson(body), spans);
  });
});

describe('values that could only be stored changed are marked or refused', () => {
  it('marks a protobuf string that is not UTF-8, so that it is never taken for the U+FFFD it decodes to', () => {
    const request = oneSpan(span({ attributes: attrs({ good: 'décodé', bad: 'XX' }) }));
    const bytes = Buffer.from(encodeOtlpProtobuf(request));
    // Replace the bad value's two bytes ('XX') with a lone continuation byte and an overlong encoding.
    const at = bytes.indexOf(Buffer.from('XX'));
    bytes[at] = 0x80;
    bytes[at + 1] = 0xc0;
    const decoded = decodeOtlpProtobuf(bytes).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    assert.equal(decoded.good, 'décodé');
    const bad = decoded.bad as string;
    assert.equal((bad as string & { isWellFormed(): boolean }).isWellFormed(), false, JSON.stringify(bad));
  });

  it('decodes strings exactly on both sides of the short-ASCII path, and marks bad UTF-8 at any length', () => {
    const values: Record<string, string> = {};
    for (const length of [1, 63, 64, 65, 200]) {
      values[`ascii${length}`] = 'a\t\u007f'.repeat(length).slice(0, length);
      values[`accent${length}`] = `${'b'.repeat(length - 1)}é`;
    }
    const request = oneSpan(span({ attributes: attrs({ ...values, bad64: 'Y'.repeat(64), bad65: 'Z'.repeat(65) }) }));
    const bytes = Buffer.from(encodeOtlpProtobuf(request));
    // A lone continuation byte last, where an ASCII scan of the first bytes would not look.
    bytes[bytes.indexOf(Buffer.from('Y'.repeat(64))) + 63] = 0x80;
    bytes[bytes.indexOf(Buffer.from('Z'.repeat(65))) + 64] = 0x80;
    const decoded = decodeOtlpProtobuf(bytes).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    for (const [key, value] of Object.entries(values)) assert.equal(decoded[key], value, key);
    for (const key of ['bad64', 'bad65']) {
      const bad = decoded[key] as string & { isWellFormed(): boolean };
      assert.equal(bad.isWellFormed(), false, key);
    }
  });

  it('decodes int lists exactly on both sides of the small-int path', () => {
    const edges = [0, 1, 127, 128, 2 ** 21 - 1, 2 ** 21, 2 ** 28 - 1, 2 ** 28, 2 ** 31, 2 ** 53 - 1, -1, -(2 ** 31)];
    const values: Record<string, AttrValue> = {
      ints: edges,
      huge: [2n ** 63n - 1n, -(2n ** 63n)],
      mixed: [5, 'five', 5.5, true, [6], 2 ** 28],
    };
    const decoded = decodeOtlpProtobuf(encodeOtlpProtobuf(oneSpan(span({ attributes: attrs(values) })))).resourceSpans[0]!.scopeSpans[0]!
      .spans[0]!.attributes;
    assert.deepEqual({ ...decoded }, values);
  });

  it('reads an array item holding an int and then a string as protobuf does: its last member', () => {
    const bytes = Buffer.from(encodeOtlpProtobuf(oneSpan(span({ attributes: attrs({ list: [7, 'x'] }) }))));
    // The items [7] and ['x'] (9 bytes) become one item of both members, then an empty one (9 bytes too).
    const items = Buffer.from([0x0a, 0x02, 0x18, 0x07, 0x0a, 0x03, 0x0a, 0x01, 0x78]);
    const at = bytes.indexOf(items);
    assert.ok(at > 0);
    Buffer.from([0x0a, 0x05, 0x18, 0x07, 0x0a, 0x01, 0x78, 0x0a, 0x00]).copy(bytes, at);
    const decoded = decodeOtlpProtobuf(bytes).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
    assert.deepEqual(decoded.list, ['x', null]);
  });

  it('marks a span time given as a JSON number past 2^53, whose digits are lost, and only then', () => {
    const json = (start: string) =>
      Buffer.from(
        `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"pd.handoff","startTimeUnixNano":${start},"endTimeUnixNano":"1796509239110000000"}]}]}]}`,
      );
    const first = (text: string) => decodeOtlpJson(json(text)).resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
    assert.equal(first('1796509239110000000').inexactTime, 'startTimeUnixNano');
    assert.equal(first('"1796509239110000000"').startTimeUnixNano, 1796509239110000000n);
    assert.equal(first('"1796509239110000000"').inexactTime, undefined);
    assert.equal(first('9007199254740991').inexactTime, undefined);
  });
});
