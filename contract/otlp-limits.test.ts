import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InputError } from '../common/errors.ts';
import { decodeOtlpJson, decodeOtlpJsonBounded, encodeOtlpJson, jsonContainers } from './otlp-json.ts';
import type { AttrMap, AttrValue, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import { decodeOtlpProtobuf, decodeOtlpProtobufBounded } from './otlp-decode.ts';
import { assembleOtlpProtobuf, encodeOtlpProtobuf, encodeOtlpResource, encodeOtlpScope, encodeOtlpSpan } from './otlp-encode.ts';
import { clipText, LimitError, type DecodeLimits } from './otlp-limits.ts';

function attrs(entries: Record<string, AttrValue>): AttrMap {
  const map: AttrMap = Object.create(null);
  for (const [k, v] of Object.entries(entries)) map[k] = v;
  return map;
}

let spanCounter = 0;
function span(name: string, attributes: AttrMap = attrs({})): OtlpSpan {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: (++spanCounter).toString(16).padStart(16, '0'),
    parentSpanId: '',
    name,
    kind: 1,
    startTimeUnixNano: 1700000000123456789n,
    endTimeUnixNano: 1700000000987654321n,
    attributes,
    statusCode: 0,
    statusMessage: '',
  };
}

function request(spans: OtlpSpan[], resource: AttrMap = attrs({ 'service.name': 'engine' })): OtlpTraceRequest {
  return { resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 's', version: '1' }, spans }] }] };
}

const LIMITS: DecodeLimits = { maxSpans: 1000, maxAttributes: 128, maxValueItems: 4096, maxDecodedBytes: 64 * 1024 * 1024 };

/** Both encodings of a request, each with its bounded decoder. */
const ENCODINGS = [
  { name: 'protobuf', decode: (r: OtlpTraceRequest, limits: DecodeLimits) => decodeOtlpProtobufBounded(encodeOtlpProtobuf(r), limits) },
  { name: 'JSON', decode: (r: OtlpTraceRequest, limits: DecodeLimits) => decodeOtlpJsonBounded(Buffer.from(encodeOtlpJson(r)), limits) },
] as const;

function assertThrows(fn: () => unknown, type: typeof InputError, message: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof type, `expected ${type.name}, got ${String(err)}`);
    assert.match((err as Error).message, message);
    return true;
  });
}

describe('bounded decoding', () => {
  for (const { name, decode } of ENCODINGS) {
    it(`${name}: within the limits, decodes what the unbounded decoder does, without span-less ResourceSpans and ScopeSpans`, () => {
      const full = request([
        span('pd.hold', attrs({ a: 'x', list: [1, 'two', [3n << 60n]], map: attrs({ k: new Uint8Array([1, 2]) }) })),
        span('http.get'),
      ]);
      const withEmpty: OtlpTraceRequest = {
        resourceSpans: [
          ...full.resourceSpans,
          { resource: attrs({ lone: true }), scopeSpans: [{ scope: { name: 'empty', version: '' }, spans: [] }] },
          { resource: attrs({}), scopeSpans: [] },
        ],
      };
      const { request: decoded, cut } = decode(withEmpty, LIMITS);
      assert.deepEqual(decoded, full);
      assert.equal(cut.size, 0);
    });

    it(`${name}: more spans than maxSpans is a LimitError (413), as many is fine`, () => {
      const spans = Array.from({ length: 11 }, () => span('x'));
      assertThrows(() => decode(request(spans), { ...LIMITS, maxSpans: 10 }), LimitError, /more than 10 spans in one request/);
      assert.equal(
        decode(request(spans.slice(0, 10)), { ...LIMITS, maxSpans: 10 }).request.resourceSpans[0]!.scopeSpans[0]!.spans.length,
        10,
      );
    });

    it(`${name}: keeps the first maxAttributes attributes and reports the map cut`, () => {
      const many = attrs(Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`a${i}`, i])));
      const { request: decoded, cut } = decode(request([span('pd.hold', many)], many), LIMITS);
      const spanAttrs = decoded.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
      const resource = decoded.resourceSpans[0]!.resource;
      assert.equal(Object.keys(spanAttrs).length, 128);
      assert.equal(spanAttrs.a127, 127);
      assert.deepEqual(cut.get(spanAttrs), { field: 'attribute_count', reason: '200 attributes, more than the limit of 128' });
      assert.deepEqual(cut.get(resource), { field: 'attribute_count', reason: '200 attributes, more than the limit of 128' });
    });

    it(`${name}: stops a value at maxValueItems, nested values counted, and says how long it was`, () => {
      const long = Array.from({ length: 10_000 }, (_, i) => i);
      const nested = Array.from({ length: 100 }, () => Array.from({ length: 100 }, () => 'v'));
      const kvlist = attrs(Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i])));
      for (const [value, reason] of [
        [long, 'x: an array of 10000 items, more than the limit of 4096 values'],
        [nested, 'x: an array holding more than the limit of 4096 values (nested ones counted)'],
        [kvlist, 'x: a key-value list of 5000 entries, more than the limit of 4096 values'],
      ] as const) {
        const { request: decoded, cut } = decode(request([span('pd.hold', attrs({ ok: [1, 2], x: value }))]), LIMITS);
        const spanAttrs = decoded.resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes;
        assert.deepEqual(cut.get(spanAttrs), { field: 'attribute_length', reason });
        assert.deepEqual(spanAttrs.ok, [1, 2]);
      }
      // At the limit exactly: nothing is cut.
      const { cut } = decode(request([span('pd.hold', attrs({ x: long.slice(0, 4096) }))]), LIMITS);
      assert.equal(cut.size, 0);
    });

    it(`${name}: decodes no attributes of spans outside attributesOnlyWithPrefix`, () => {
      const many = attrs(Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`a${i}`, i])));
      const { request: decoded, cut } = decode(request([span('db.query', many), span('pd.hold', attrs({ a: 1 }))]), {
        ...LIMITS,
        attributesOnlyWithPrefix: 'pd.',
      });
      const [other, ours] = decoded.resourceSpans[0]!.scopeSpans[0]!.spans;
      assert.equal(other!.name, 'db.query');
      assert.deepEqual(Object.keys(other!.attributes), []);
      assert.ok(Object.isFrozen(other!.attributes));
      assert.deepEqual(ours!.attributes, attrs({ a: 1 }));
      assert.equal(cut.size, 0);
    });

    it(`${name}: refuses a request whose decoded form would pass maxDecodedBytes`, () => {
      // Empty key-value lists: a few bytes each on the wire, a couple of hundred bytes each as objects.
      const empties = Array.from({ length: 100 }, (_, i) => [`k${i}`, Array.from({ length: 1000 }, () => attrs({}))] as const);
      const r = request(Array.from({ length: 10 }, () => span('pd.hold', attrs(Object.fromEntries(empties)))));
      assertThrows(
        () => decode(r, { ...LIMITS, maxAttributes: 1000, maxValueItems: 10_000, maxDecodedBytes: 8 * 1024 * 1024 }),
        LimitError,
        /more than 8 MiB of memory once decoded/,
      );
    });
  }

  it('protobuf: a key too long for a message is clipped in the reason of a nesting error', () => {
    const key = 'k'.repeat(10_000);
    assertThrows(
      () => decodeOtlpProtobuf(deepAttribute(key, 17)),
      InputError,
      /attributes\["k{128}… \(10000 characters\)"\]: values nested deeper than 16 levels$/,
    );
  });

  it('protobuf: names wire errors as protobufjs did (field 0, lengths, groups)', () => {
    assertThrows(() => decodeOtlpProtobuf(Buffer.from('0005', 'hex')), InputError, /^protobuf: illegal tag: field number 0$/);
    assertThrows(() => decodeOtlpProtobuf(Buffer.from('0a8080808010', 'hex')), InputError, /^protobuf: invalid length encoding$/);
    assertThrows(() => decodeOtlpProtobuf(Buffer.from('1b24', 'hex')), InputError, /^protobuf: invalid end group tag$/);
    assertThrows(() => decodeOtlpProtobuf(Buffer.alloc(1000, 0x13)), InputError, /^protobuf: max depth exceeded$/);
    assertThrows(() => decodeOtlpProtobuf(Buffer.from('0a05', 'hex')), InputError, /^protobuf: truncated or malformed message/);
    // Unknown fields of every wire type are skipped, groups included.
    assert.deepEqual(
      decodeOtlpProtobuf(Buffer.from('1801' + '21' + '00'.repeat(8) + '2a00' + '1b1801 1c'.replace(' ', '') + '3d00000000', 'hex')),
      { resourceSpans: [] },
    );
  });

  it('protobuf: an AnyValue takes its last member, and repeated messages merge', () => {
    // KeyValue "k" with AnyValue { string_value "a", int_value 5 }: the last member wins.
    const kv = Buffer.from('0a016b1205' + '0a0161' + '1805', 'hex');
    const body = wrap(1, wrap(2, wrap(2, Buffer.concat([Buffer.from('2a0170', 'hex'), wrap(9, kv)]))));
    assert.equal(decodeOtlpProtobuf(body).resourceSpans[0]!.scopeSpans[0]!.spans[0]!.attributes.k, 5);
    // A resource given twice: its attributes merge.
    const resource = (k: string) => wrap(1, wrap(1, Buffer.concat([Buffer.from([0x0a, 1, k.charCodeAt(0), 0x12, 2, 0x18, 1])])));
    const merged = wrap(1, Buffer.concat([resource('a'), resource('b')]));
    assert.deepEqual(decodeOtlpProtobuf(merged).resourceSpans[0]!.resource, attrs({ a: 1, b: 1 }));
  });
});

describe('JSON bounds', () => {
  it('counts the objects and arrays JSON.parse would build, not braces inside strings', () => {
    const text = JSON.stringify({ a: [1, { b: '{[ "quoted" \\ ]}' }], c: {}, d: 'x\\"{' });
    assert.equal(jsonContainers(Buffer.from(text)), 4);
    assert.equal(jsonContainers(Buffer.from('[[[[')), 4);
    assert.equal(jsonContainers(Buffer.from('"unterminated {')), 0);
  });

  it('refuses a document that is no object unparsed, and one that would build too many objects', () => {
    assertThrows(
      () => decodeOtlpJsonBounded(Buffer.from(`  ${'['.repeat(100_000)}`), LIMITS),
      InputError,
      /^json: expected an object .*"\["$/,
    );
    const body = Buffer.from(`{"resourceSpans":[],"x":${'['.repeat(200_000)}${']'.repeat(200_000)}}`);
    assertThrows(() => decodeOtlpJsonBounded(body, { ...LIMITS, maxDecodedBytes: 8 * 1024 * 1024 }), LimitError, /more than 8 MiB/);
    // Unbounded, the same document decodes (unknown fields are ignored).
    assert.deepEqual(decodeOtlpJson(body), { resourceSpans: [] });
  });
});

describe('assembling a request from parts encoded on their own', () => {
  it('writes the bytes encodeOtlpProtobuf writes', () => {
    const r1 = attrs({ 'service.name': 'a', big: 'x'.repeat(300) });
    const r2 = attrs({});
    const spans = [
      span('pd.hold', attrs({ list: Array.from({ length: 100 }, (_, i) => i) })),
      span('pd.ack', attrs({ s: 'y'.repeat(20_000) })),
      span(''),
    ];
    const req: OtlpTraceRequest = {
      resourceSpans: [
        {
          resource: r1,
          scopeSpans: [
            { scope: { name: 's', version: '1' }, spans: spans.slice(0, 2) },
            { scope: { name: '', version: '' }, spans: spans.slice(2) },
          ],
        },
        { resource: r2, scopeSpans: [{ scope: { name: 'q'.repeat(200), version: '' }, spans }] },
      ],
    };
    const assembled = assembleOtlpProtobuf(
      req.resourceSpans.map((rs) => ({
        resource: encodeOtlpResource(rs.resource),
        scopeSpans: rs.scopeSpans.map((ss) => ({ scope: encodeOtlpScope(ss.scope), spans: ss.spans.map(encodeOtlpSpan) })),
      })),
    );
    assert.ok(Buffer.from(assembled).equals(Buffer.from(encodeOtlpProtobuf(req))));
    assert.equal(assembleOtlpProtobuf([]).length, 0);
  });
});

describe('clipText', () => {
  it('keeps short text and says how long long text was', () => {
    assert.equal(clipText('short'), 'short');
    assert.equal(clipText('x'.repeat(200), 10), `${'x'.repeat(10)}… (200 characters)`);
  });
});

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

function wrap(field: number, inner: Buffer): Buffer {
  return Buffer.concat([Buffer.from([(field << 3) | 2]), varint(inner.length), inner]);
}

/** A request whose one span has attribute `key` = `levels` nested arrays around an int. */
function deepAttribute(key: string, levels: number): Buffer {
  let value: Buffer = Buffer.from([0x18, 0x01]);
  for (let i = 0; i < levels; i++) value = wrap(5, wrap(1, value));
  const kv = Buffer.concat([wrap(1, Buffer.from(key)), wrap(2, value)]);
  return wrap(1, wrap(2, wrap(2, wrap(9, kv))));
}
