import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  Attr,
  declaredEncoding,
  encodeOtlpJson,
  encodeOtlpProtobuf,
  forEachSpan,
  MESSAGE_HEADERS,
  ResourceAttr,
  spanTimeWindow,
  type AttrMap,
  type MessageHeaders,
  type OtlpResourceSpans,
  type OtlpSpan,
  type OtlpTraceRequest,
} from '../contract/index.ts';
import { createLogger, InputError } from '../common/index.ts';
import { decodeMessage, eventsOf } from './decode.ts';
import { rowsOf } from './ingest.ts';
import { createPipelineMetrics } from './metrics.ts';

const START_NS = 1_767_225_600_000_000_000n;

const DECODE_RESOURCE: AttrMap = {
  [ResourceAttr.role]: 'decode',
  [ResourceAttr.engineId]: 'decode-0',
  [ResourceAttr.engineVersion]: 'v1',
  [ResourceAttr.transferBackend]: 'mooncake',
  [ResourceAttr.kvCapacitySlots]: 4096,
};

function span(name: string, spanId: string, attributes: AttrMap, startNs = START_NS): OtlpSpan {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId,
    parentSpanId: '',
    name,
    kind: 1,
    startTimeUnixNano: startNs,
    endTimeUnixNano: startNs,
    attributes,
    statusCode: 0,
    statusMessage: '',
  };
}

const hold = (requestId: string, spanId: string, startNs = START_NS) =>
  span(
    'pd.hold',
    spanId,
    {
      [Attr.requestId]: requestId,
      [Attr.generation]: 0,
      [Attr.holdExpectedRanks]: [0, 1],
      [Attr.holdTimeoutMs]: 30_000,
      [Attr.kvSlots]: 64,
      [Attr.kvPages]: [1, 2, 3, 4],
    },
    startNs,
  );
const release = (requestId: string, spanId: string) =>
  span('pd.release', spanId, {
    [Attr.requestId]: requestId,
    [Attr.generation]: 0,
    [Attr.releaseReason]: 'drained',
    [Attr.kvPages]: [1, 2, 3, 4],
  });

/**
 * A first ResourceSpans that encodes (protobuf) to exactly `length` bytes. The lengths the tests need are those whose
 * varint is a JSON whitespace byte (9 tab, 10 newline, 13 carriage return, 32 space) or `{` (123): after the request's
 * first byte 0x0a, itself a newline, such a message looks like JSON by its first bytes.
 */
function firstResourceSpans(length: 9 | 10 | 13 | 32 | 123): OtlpResourceSpans {
  const scope = (nameLength: number, spans: OtlpSpan[] = []) => [{ scope: { name: 's'.repeat(nameLength), version: '' }, spans }];
  switch (length) {
    case 9:
      return { resource: { k: null }, scopeSpans: [] }; // 0a 05 (0a 03 (0a 01 'k' 12 00))
    case 10:
      return { resource: {}, scopeSpans: scope(0) };
    case 13:
      return { resource: {}, scopeSpans: scope(3) };
    case 32:
      return { resource: {}, scopeSpans: scope(22) };
    case 123:
      // With a span (not ours), so the first ResourceSpans carries spans too.
      return {
        resource: { 'service.name': 'gateway' },
        scopeSpans: scope(0, [span('http.request', 'a1a2a3a4a5a6a7a8', { 'http.method': 'GET' })]),
      };
  }
}

/** A request whose first ResourceSpans encodes to `length` bytes, followed by PD spans of two resources. */
function requestWithFirst(length: 9 | 10 | 13 | 32 | 123): OtlpTraceRequest {
  return {
    resourceSpans: [
      firstResourceSpans(length),
      {
        resource: DECODE_RESOURCE,
        scopeSpans: [
          { scope: { name: 'holdscope', version: '1' }, spans: [hold('r-1', '00000000000000a1'), release('r-1', '00000000000000a2')] },
        ],
      },
      {
        resource: { ...DECODE_RESOURCE, [ResourceAttr.engineId]: 'decode-1' },
        scopeSpans: [{ scope: { name: 'holdscope', version: '1' }, spans: [hold('r-2', '00000000000000b1')] }],
      },
    ],
  };
}

/** The first ResourceSpans' length as its protobuf encoding says: the varint after the request's first byte, 0x0a. */
function firstLength(bytes: Uint8Array): number {
  assert.equal(bytes[0], 0x0a);
  let length = 0;
  for (let i = 1, shift = 0; ; i++, shift += 7) {
    length |= (bytes[i]! & 0x7f) << shift;
    if (bytes[i]! < 0x80) return length;
  }
}

/** Every span with its resource, in order: what a decoded message must give back. */
function spansOf(request: OtlpTraceRequest): { resource: AttrMap; span: OtlpSpan }[] {
  const out: { resource: AttrMap; span: OtlpSpan }[] = [];
  forEachSpan(request, (span, resource) => out.push({ resource: { ...resource }, span: { ...span, attributes: { ...span.attributes } } }));
  return out;
}

/** Headers as kafkajs gives them: Buffers. */
const asKafkaHeaders = (headers: Record<string, string>): MessageHeaders =>
  Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)]));
const JSON_HEADERS = asKafkaHeaders({ 'content-type': 'application/json' });

const LENGTHS = [9, 10, 13, 32, 123] as const;

describe('decodeMessage: protobuf whose first ResourceSpans length byte looks like JSON', () => {
  for (const length of LENGTHS) {
    const request = requestWithFirst(length);
    const protobuf = Buffer.from(encodeOtlpProtobuf(request));
    const json = Buffer.from(encodeOtlpJson(request));

    it(`first ResourceSpans of ${length} bytes: protobuf, with and without headers`, () => {
      assert.equal(firstLength(protobuf), length);
      assert.equal(protobuf[1], length, 'a one-byte varint: the byte after 0x0a is the length itself');
      assert.equal(spansOf(request).length, length === 123 ? 4 : 3);
      assert.deepEqual(spansOf(decodeMessage(protobuf)), spansOf(request), 'without headers');
      assert.deepEqual(spansOf(decodeMessage(protobuf, asKafkaHeaders(MESSAGE_HEADERS))), spansOf(request), "with the collector's headers");
      assert.deepEqual(
        spansOf(decodeMessage(protobuf, { 'content-type': 'application/x-protobuf' })),
        spansOf(request),
        'with a content type only',
      );
    });

    it(`first ResourceSpans of ${length} bytes: JSON, with and without headers, after whitespace that starts with a newline`, () => {
      assert.deepEqual(spansOf(decodeMessage(json)), spansOf(request), 'without headers');
      assert.deepEqual(spansOf(decodeMessage(json, JSON_HEADERS)), spansOf(request), 'with a JSON content type');
      assert.deepEqual(
        spansOf(decodeMessage(json, asKafkaHeaders({ 'holdscope-encoding': 'otlp_json' }))),
        spansOf(request),
        'with holdscope-encoding',
      );
      // Starting with 0x0a like protobuf: the ambiguous start, where the whole value decides.
      for (const lead of ['\n', '\n\t ', ' \r\n']) {
        assert.deepEqual(
          spansOf(decodeMessage(Buffer.concat([Buffer.from(lead), json]))),
          spansOf(request),
          `after ${JSON.stringify(lead)}`,
        );
      }
    });

    it(`first ResourceSpans of ${length} bytes: the PD spans validate into the same events either way`, () => {
      const fromProtobuf = eventsOf(protobuf);
      assert.deepEqual(
        fromProtobuf.events.map((e) => [e.name, e.requestId, e.spanId, e.engine.id]),
        [
          ['pd.hold', 'r-1', '00000000000000a1', 'decode-0'],
          ['pd.release', 'r-1', '00000000000000a2', 'decode-0'],
          ['pd.hold', 'r-2', '00000000000000b1', 'decode-1'],
        ],
      );
      assert.equal(fromProtobuf.notOurs, length === 123 ? 1 : 0);
      assert.deepEqual(eventsOf(json), fromProtobuf);
      assert.deepEqual(eventsOf(protobuf, asKafkaHeaders(MESSAGE_HEADERS)), fromProtobuf);
    });
  }

  it('the 123-byte case starts 0a 7b: a newline then `{`, what was sent to the JSON decoder', () => {
    const protobuf = Buffer.from(encodeOtlpProtobuf(requestWithFirst(123)));
    assert.deepEqual([...protobuf.subarray(0, 2)], [0x0a, 0x7b]);
  });
});

describe('decodeMessage: the headers declare the encoding, which is never guessed over', () => {
  const request = requestWithFirst(123);
  const protobuf = Buffer.from(encodeOtlpProtobuf(request));
  const json = Buffer.from(encodeOtlpJson(request));

  it('a value that is not what its headers declare is undecodable, not decoded as the other encoding', () => {
    assert.throws(
      () => decodeMessage(protobuf, JSON_HEADERS),
      (err: unknown) => err instanceof InputError && /^json: /.test(err.message),
    );
    assert.throws(
      () => decodeMessage(json, asKafkaHeaders(MESSAGE_HEADERS)),
      (err: unknown) => err instanceof InputError && /^protobuf: /.test(err.message),
    );
    assert.throws(() => eventsOf(json, asKafkaHeaders(MESSAGE_HEADERS)), InputError);
  });

  it('holdscope-encoding wins over content-type; unknown values leave the bytes to tell', () => {
    assert.equal(declaredEncoding({ 'content-type': 'application/json', 'holdscope-encoding': 'otlp_proto' }), 'otlp_proto');
    assert.equal(declaredEncoding({ 'content-type': 'application/json', 'holdscope-encoding': 'zstd_magic' }), 'otlp_json');
    assert.equal(declaredEncoding({ 'content-type': 'Application/JSON; charset=utf-8' }), 'otlp_json');
    assert.equal(declaredEncoding({ 'content-type': 'application/protobuf' }), 'otlp_proto');
    assert.equal(
      declaredEncoding({ 'content-type': [Buffer.from('application/json'), Buffer.from('application/x-protobuf')] }),
      'otlp_proto',
      'the last of a repeated header',
    );
    for (const headers of [
      undefined,
      {},
      { 'content-type': 'text/plain' },
      { 'holdscope-encoding': '__proto__' },
      { 'content-type': 'constructor' },
      { other: 'x' },
    ]) {
      assert.equal(declaredEncoding(headers), undefined, JSON.stringify(headers));
    }
    assert.deepEqual(spansOf(decodeMessage(protobuf, { 'content-type': 'text/plain' })), spansOf(request));
    assert.deepEqual(spansOf(decodeMessage(json, { 'content-type': 'text/plain' })), spansOf(request));
  });

  it('a value starting like JSON that is neither JSON nor protobuf is undecodable', () => {
    for (const value of ['\n{"resourceSpans": [', '\n{\u0001\u0002', '{"resourceSpans": 7}']) {
      assert.throws(() => decodeMessage(Buffer.from(value)), InputError, JSON.stringify(value));
    }
  });
});

describe('eventsOf and rowsOf: headers and the time window', () => {
  const log = createLogger('test', 'silent');
  const nowMs = Number(START_NS / 1_000_000n) + 60_000;

  it('eventsOf rejects, naming the field, spans outside the window, and spans past what can be stored without one', () => {
    const request: OtlpTraceRequest = {
      resourceSpans: [
        {
          resource: DECODE_RESOURCE,
          scopeSpans: [
            {
              scope: { name: 's', version: '' },
              spans: [
                hold('r-now', '01', START_NS),
                hold('r-old', '02', START_NS - 31n * 86_400_000_000_000n),
                hold('r-2300', '03', 10_413_792_000_000_000_000n),
              ],
            },
          ],
        },
      ],
    };
    const value = Buffer.from(encodeOtlpProtobuf(request));
    const loose = eventsOf(value);
    assert.deepEqual(
      loose.events.map((e) => e.requestId),
      ['r-now', 'r-old'],
    );
    assert.deepEqual(
      loose.invalid.map((i) => i.field),
      ['span.start_time'],
    );
    const windowed = eventsOf(value, asKafkaHeaders(MESSAGE_HEADERS), spanTimeWindow(nowMs, 3_600_000, 30));
    assert.deepEqual(
      windowed.events.map((e) => e.requestId),
      ['r-now'],
    );
    assert.deepEqual(
      windowed.invalid.map((i) => [i.field, /retention|the last time/.exec(i.reason)?.[0]]),
      [
        ['span.start_time', 'retention'],
        ['span.start_time', 'the last time'],
      ],
    );
  });

  it('rowsOf decodes each message by its headers and applies the window', async () => {
    const request = requestWithFirst(123);
    const protobuf = Buffer.from(encodeOtlpProtobuf(request));
    const metrics = createPipelineMetrics();
    const rows = rowsOf(
      [
        { value: protobuf, headers: asKafkaHeaders(MESSAGE_HEADERS) },
        { value: protobuf },
        { value: protobuf, headers: JSON_HEADERS }, // declared JSON: undecodable, skipped
        { value: null },
      ],
      'Native',
      metrics,
      log,
    );
    assert.equal(rows.rows, 6);
    assert.equal((await metrics.undecodable.get()).values[0]?.value, 2);
    const late = rowsOf(
      [{ value: protobuf }],
      'TabSeparated',
      createPipelineMetrics(),
      log,
      spanTimeWindow(nowMs + 40 * 86_400_000, 3_600_000, 30),
    );
    assert.equal(late.rows, 0, 'every span is past the retention 40 days on');
  });
});
