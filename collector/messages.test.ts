import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  Attr,
  decodeOtlpJson,
  decodeOtlpProtobuf,
  forEachSpan,
  ResourceAttr,
  type AttrMap,
  type AttrValue,
  type OtlpSpan,
  type OtlpTraceRequest,
  assembleOtlpProtobuf,
  decodeOtlpProtobufBounded,
  encodeOtlpProtobuf,
  encodeOtlpResource,
  encodeOtlpScope,
  encodeOtlpSpan,
  LimitError,
} from '../contract/index.ts';
import { MESSAGE_HEADERS } from '../contract/index.ts';
import {
  attributeProblem,
  BATCH_OVERHEAD_BYTES,
  recordBytes,
  rejectionSummary,
  triage,
  valueProblem,
  type TriageLimits,
} from './messages.ts';

function attrs(entries: Record<string, AttrValue>): AttrMap {
  const map: AttrMap = Object.create(null);
  for (const [k, v] of Object.entries(entries)) map[k] = v;
  return map;
}

const RESOURCE = attrs({
  [ResourceAttr.role]: 'decode',
  [ResourceAttr.engineId]: 'decode-0',
  [ResourceAttr.engineVersion]: 'v1',
  [ResourceAttr.transferBackend]: 'mooncake',
  [ResourceAttr.kvCapacitySlots]: 1000,
});

let counter = 0;
/** A valid pd.hold span of `requestId`, with extra attributes. */
function hold(requestId: string, extra: Record<string, AttrValue> = {}, name = 'pd.hold'): OtlpSpan {
  const n = ++counter;
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: n.toString(16).padStart(16, '0'),
    parentSpanId: '',
    name,
    kind: 1,
    startTimeUnixNano: 1_767_225_600_000_000_000n + BigInt(n),
    endTimeUnixNano: 1_767_225_600_001_000_000n + BigInt(n),
    attributes: attrs({
      [Attr.requestId]: requestId,
      [Attr.generation]: 0,
      [Attr.holdExpectedRanks]: [0, 1],
      [Attr.holdTimeoutMs]: 30000,
      [Attr.kvSlots]: 64,
      [Attr.kvPages]: [1, 2, 3, 4],
      ...extra,
    }),
    statusCode: 0,
    statusMessage: '',
  };
}

function request(spans: OtlpSpan[], resource: AttrMap = RESOURCE): OtlpTraceRequest {
  return { resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 'test', version: '1' }, spans }] }] };
}

const LIMITS: TriageLimits = { maxAttributeLength: 4096, maxAttributes: 128, maxMessageBytes: 100_000 };

function spanIdsOf(values: Buffer[]): string[] {
  const ids: string[] = [];
  for (const value of values) forEachSpan(decodeOtlpProtobuf(value), (span) => ids.push(span.spanId));
  return ids;
}

function letter(value: Buffer): { reason: string; field: string; span_name: string; truncated?: string[]; otlp: unknown } {
  return JSON.parse(value.toString()) as { reason: string; field: string; span_name: string; truncated?: string[]; otlp: unknown };
}

describe('attribute limits', () => {
  it('measures strings in characters, bytes in bytes, arrays and key-value lists in values, nested ones counted', () => {
    assert.equal(valueProblem('x'.repeat(10), 10), undefined);
    assert.equal(valueProblem('x'.repeat(11), 10), 'a string of 11 characters, more than the limit of 10');
    assert.equal(valueProblem(new Uint8Array(11), 10), '11 bytes, more than the limit of 10');
    assert.equal(
      valueProblem(
        Array.from({ length: 10 }, () => 1),
        10,
      ),
      undefined,
    );
    assert.equal(
      valueProblem(
        Array.from({ length: 11 }, () => 1),
        10,
      ),
      'an array of 11 items, more than the limit of 10 values',
    );
    assert.equal(
      valueProblem(attrs(Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`k${i}`, i]))), 10),
      'a key-value list of 11 entries, more than the limit of 10 values',
    );
    assert.equal(
      valueProblem(
        [
          [1, 2, 3],
          [4, 5, 6],
          [7, 8],
        ],
        10,
      ),
      'an array holding more than the limit of 10 values (nested ones counted)',
    );
    assert.equal(valueProblem([[1, 2], [3]], 10), undefined);
    assert.equal(valueProblem([attrs({ s: 'x'.repeat(11) })], 10), 'an array holding a string of 11 characters, more than the limit of 10');
    assert.equal(valueProblem([new Uint8Array(11)], 10), 'an array holding 11 bytes, more than the limit of 10');
    assert.equal(
      valueProblem(attrs({ ['k'.repeat(11)]: 1 }), 10),
      'a key-value list holding a key of 11 characters, more than the limit of 10',
    );
    assert.equal(valueProblem([attrs({ ['k'.repeat(11)]: 1 })], 10), 'an array holding a key of 11 characters, more than the limit of 10');
    for (const v of [null, true, 1.5, 2n ** 60n]) assert.equal(valueProblem(v, 0), undefined);
  });

  it('counts attributes and names the offending key, clipped', () => {
    const many = attrs(Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`a${i}`, i])));
    assert.deepEqual(attributeProblem(many, new Map(), 10, 4), {
      field: 'attribute_count',
      reason: '5 attributes, more than the limit of 4',
    });
    assert.equal(attributeProblem(many, new Map(), 10, 5), undefined);
    const longKey = 'k'.repeat(1000);
    assert.deepEqual(attributeProblem(attrs({ [longKey]: 1 }), new Map(), 10, 5), {
      field: 'attribute_length',
      reason: `${'k'.repeat(128)}… (1000 characters): a key of 1000 characters, more than the limit of 10`,
    });
    assert.deepEqual(attributeProblem(attrs({ [longKey]: 'x'.repeat(2001) }), new Map(), 2000, 5), {
      field: 'attribute_length',
      reason: `${'k'.repeat(128)}… (1000 characters): a string of 2001 characters, more than the limit of 2000`,
    });
  });
});

describe('triage', () => {
  it('puts a lifecycle that does not fit one message into several with its key, every span once, in order', () => {
    const spans = Array.from({ length: 60 }, () => hold('req-big', { 'x.note': 'n'.repeat(4000) }));
    const other = hold('req-small');
    const out = triage(request([...spans, other]), LIMITS);
    assert.equal(out.accepted, 61);
    assert.equal(out.rejections.length, 0);
    const big = out.messages.filter((m) => m.key === 'default/req-big');
    assert.ok(big.length >= 3, `${big.length} messages`);
    for (const m of out.messages)
      assert.ok(
        recordBytes(m.key, m.value.length, MESSAGE_HEADERS) <= LIMITS.maxMessageBytes! - BATCH_OVERHEAD_BYTES,
        `${m.value.length} bytes`,
      );
    assert.deepEqual(
      spanIdsOf(big.map((m) => m.value)),
      spans.map((s) => s.spanId),
    );
    assert.deepEqual(
      big.map((m) => m.spans).reduce((a, b) => a + b),
      60,
    );
    assert.deepEqual(spanIdsOf(out.messages.filter((m) => m.key === 'default/req-small').map((m) => m.value)), [other.spanId]);
    // Each message is a whole request with the spans' resource and scope.
    const decoded = decodeOtlpProtobuf(big[1]!.value);
    assert.deepEqual(decoded.resourceSpans[0]!.resource, RESOURCE);
    assert.deepEqual(decoded.resourceSpans[0]!.scopeSpans[0]!.scope, { name: 'test', version: '1' });
  });

  it('writes what encodeOtlpProtobuf writes when a lifecycle fits one message', () => {
    const spans = [hold('r1'), hold('r1')];
    const out = triage(request(spans), LIMITS);
    assert.equal(out.messages.length, 1);
    assert.ok(out.messages[0]!.value.equals(Buffer.from(encodeOtlpProtobuf(request(spans)))));
  });

  it('passes a protobuf span on with its own bytes, which decode to the same span and keep what the model drops', () => {
    const [kept, other, rejected] = [hold('r-raw'), hold('r-other'), hold('r-raw', { [Attr.generation]: 'zero' })];
    // pd.hold with an event (Span field 11: an Event named "abc"), which the model has no place for.
    const withEvent = Buffer.concat([encodeOtlpSpan(kept), Buffer.from([0x5a, 5, 0x12, 3, 0x61, 0x62, 0x63])]);
    const scope = { name: 'test', version: '1' };
    const body = assembleOtlpProtobuf([
      {
        resource: encodeOtlpResource(RESOURCE),
        scopeSpans: [{ scope: encodeOtlpScope(scope), spans: [withEvent, encodeOtlpSpan(other), encodeOtlpSpan(rejected)] }],
      },
    ]);
    const decoded = decodeOtlpProtobufBounded(body, { maxSpans: 10, maxAttributes: 128, maxValueItems: 4096, maxDecodedBytes: 1 << 26 });
    const out = triage(decoded.request, LIMITS, new Date(), decoded.cut, decoded.spanBytes);
    assert.equal(out.accepted, 2);
    assert.equal(out.rejections.length, 1);
    const raw = out.messages.find((m) => m.key === 'default/r-raw');
    assert.ok(raw && raw.value.includes(withEvent), 'the span as it came, event included');
    // The same spans as the decoded request's, resource and scope too, whichever way the message was built.
    const encoded = triage(decoded.request, LIMITS);
    assert.equal(encoded.messages.length, out.messages.length);
    for (const [n, m] of out.messages.entries()) {
      assert.equal(m.key, encoded.messages[n]!.key);
      assert.deepEqual(decodeOtlpProtobuf(m.value), decodeOtlpProtobuf(encoded.messages[n]!.value));
    }
    assert.ok(!encoded.messages.some((m) => m.value.includes(withEvent)), 'encoding the decoded span again drops the event');
  });

  it('rejects a span too large for a message on its own, with a clear reason and a small dead letter', () => {
    const huge = hold('req-huge', Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x.${i}`, 'y'.repeat(4000)])));
    const out = triage(request([huge, hold('req-fine')]), LIMITS);
    assert.equal(out.accepted, 1);
    assert.equal(out.rejections.length, 1);
    assert.equal(out.rejections[0]!.field, 'message_size');
    assert.match(
      out.rejections[0]!.reason,
      /^the span takes \d+ bytes in a Kafka message with its resource and scope, more than the limit of 99872$/,
    );
    assert.equal(out.deadLetters.length, 1);
    assert.equal(out.deadLetters[0]!.key, 'default/req-huge');
    assert.ok(out.deadLetters[0]!.value.length < 50_000, `${out.deadLetters[0]!.value.length} bytes`);
  });

  it('rejects bytes values, key-value lists and attribute counts past the limits, of the span or its resource', () => {
    const cases: [OtlpTraceRequest, string, RegExp][] = [
      [request([hold('r', { blob: new Uint8Array(5000) })]), 'attribute_length', /^blob: 5000 bytes, more than the limit of 4096$/],
      [
        request([hold('r', { map: attrs(Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i]))) })]),
        'attribute_length',
        /^map: a key-value list of 5000 entries/,
      ],
      [
        request([hold('r', Object.fromEntries(Array.from({ length: 130 }, (_, i) => [`a${i}`, i])))]),
        'attribute_count',
        /^136 attributes, more than the limit of 128$/,
      ],
      [
        request([hold('r')], attrs({ ...RESOURCE, big: 'x'.repeat(5000) })),
        'attribute_length',
        /^resource: big: a string of 5000 characters/,
      ],
    ];
    for (const [r, field, reason] of cases) {
      const out = triage(r, LIMITS);
      assert.equal(out.accepted, 0);
      assert.equal(out.rejections[0]!.field, field);
      assert.match(out.rejections[0]!.reason, reason);
      assert.equal(out.deadLetters.length, 1);
    }
  });

  it("rejects with the decoder's reason a span whose attributes the decoder cut, before the contract check", () => {
    // pd.request.id comes after 200 other attributes: the decoder keeps 128, so the contract would miss it.
    const span = hold('r');
    span.attributes = attrs({ ...Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`a${i}`, i])), ...span.attributes });
    const { request: decoded, cut } = decodeOtlpProtobufBounded(encodeOtlpProtobuf(request([span])), {
      maxSpans: 10,
      maxAttributes: 128,
      maxValueItems: 4096,
      maxDecodedBytes: 1 << 26,
    });
    const out = triage(decoded, LIMITS, new Date(), cut);
    assert.deepEqual(out.rejections, [
      { spanName: 'pd.hold', field: 'attribute_count', reason: '206 attributes, more than the limit of 128' },
    ]);
    assert.ok(letter(out.deadLetters[0]!.value).truncated?.some((t) => t.startsWith('attributes: cut while decoding (206 attributes')));
  });

  it('keeps dead letters and reasons small, saying how long what was cut was', () => {
    const name = `pd.${'n'.repeat(3 * 1024 * 1024)}`;
    const unknownName = hold('r1', {}, name);
    const longArray = hold('r2', { 'x.pages': Array.from({ length: 900_000 }, () => 1), 'x.blob': new Uint8Array(100_000) });
    const out = triage(request([unknownName, longArray]), LIMITS, new Date('2026-01-01T00:00:00Z'));
    assert.equal(out.deadLetters.length, 2);
    const [first, second] = out.deadLetters.map((d) => letter(d.value));
    assert.match(first!.reason, /^unknown PD span name "pd\.n{97}"… \(3145731 characters\)$/);
    assert.equal(first!.span_name, `${name.slice(0, 256)}… (${name.length} characters)`);
    assert.ok(first!.truncated?.includes('name: 3145731 characters, the first 256 kept'), JSON.stringify(first!.truncated));
    assert.match(second!.reason, /^x\.pages: an array of 900000 items, more than the limit of 4096 values$/);
    assert.ok(
      second!.truncated?.includes('attributes["x.pages"]: an array of 900000 items, the first 32 kept'),
      JSON.stringify(second!.truncated),
    );
    assert.ok(second!.truncated?.includes('attributes["x.blob"]: 100000 bytes, the first 256 kept'), JSON.stringify(second!.truncated));
    for (const d of out.deadLetters) assert.ok(d.value.length < 20_000, `${d.value.length} bytes`);
    // `otlp` is OTLP/JSON the codec reads back: the shortened span with its resource.
    const otlp = decodeOtlpJson(second!.otlp);
    const shown = otlp.resourceSpans[0]!.scopeSpans[0]!.spans[0]!;
    assert.equal(shown.spanId, longArray.spanId);
    assert.equal((shown.attributes['x.pages'] as AttrValue[]).length, 32);
    assert.deepEqual(otlp.resourceSpans[0]!.resource, RESOURCE);
    const summary = rejectionSummary(out.rejections);
    assert.ok(summary.length < 1000, summary);
    assert.match(summary, /^2 PD span\(s\) rejected: pd\.n+… \(3145731 characters\): unknown PD span name/);
  });

  it("leaves the span out of dead letters once a request's letters are large", () => {
    const bad = Array.from({ length: 30 }, () => hold('r', { [Attr.requestId]: '', big: 'x'.repeat(200) }));
    const out = triage(request(bad), { ...LIMITS, maxDeadLetterBytes: 5000 });
    const letters = out.deadLetters.map((d) => letter(d.value));
    assert.ok(letters[0]!.otlp !== null);
    assert.equal(letters.at(-1)!.otlp, null);
    assert.deepEqual(letters.at(-1)!.truncated, ["otlp: left out, this request's dead letters passed 5000 bytes"]);
    assert.match(letters.at(-1)!.reason, /pd\.request\.id/);
  });

  it('refuses (LimitError) a request whose messages would pass maxRequestKafkaBytes', () => {
    // Every lifecycle's message repeats the resource: 200 ids under a 20 kB resource make 4 MB from a small body.
    const resource = attrs({ ...RESOURCE, ...Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`r${i}`, 'v'.repeat(2000)])) });
    const spans = Array.from({ length: 200 }, (_, i) => hold(`id-${i}`));
    assert.throws(
      () => triage(request(spans, resource), { ...LIMITS, maxRequestKafkaBytes: 1024 * 1024 }),
      (err: unknown) => {
        assert.ok(err instanceof LimitError);
        assert.match(err.message, /more than the limit of 1048576; send smaller batches$/);
        return true;
      },
    );
    assert.equal(triage(request(spans, resource), LIMITS).messages.length, 200);
  });
});

describe('triage: what can be stored and the time rules', () => {
  /** A hold of `requestId` as an instant at `ns`. */
  const holdAt = (requestId: string, ns: bigint, extra: Record<string, AttrValue> = {}): OtlpSpan => ({
    ...hold(requestId, extra),
    startTimeUnixNano: ns,
    endTimeUnixNano: ns,
  });
  const receivedAt = new Date(Date.UTC(2026, 11, 5, 12));
  const nowNs = BigInt(receivedAt.getTime()) * 1_000_000n;
  const HOUR_NS = 3_600_000_000_000n;
  const DAY_NS = 24n * HOUR_NS;

  it('rejects values their column cannot hold, naming the field, in the partial success and the dead letter', () => {
    const spans = [
      holdAt('r-2300', 10_413_792_000_000_000_000n),
      holdAt('r-gen', nowNs, { [Attr.generation]: 2 ** 40 }),
      holdAt('r-page', nowNs, { [Attr.kvPages]: [1, 2 ** 33] }),
      holdAt('r-fine', nowNs),
    ];
    const out = triage(request(spans), LIMITS, receivedAt);
    assert.equal(out.accepted, 1);
    assert.deepEqual(spanIdsOf(out.messages.map((m) => m.value)), [spans[3]!.spanId]);
    assert.deepEqual(
      out.rejections.map((r) => r.field),
      ['span.start_time', Attr.generation, Attr.kvPages],
    );
    const summary = rejectionSummary(out.rejections);
    assert.match(
      summary,
      /^3 PD span\(s\) rejected: pd\.hold: span\.start_time: 2300-01-01T00:00:00\.000000000Z is later than 2106-02-07T06:28:15\.999999999Z/,
    );
    assert.match(
      summary,
      /pd\.request\.generation: expected an integer from 0 to 4294967295 \(stored as UInt32\), got number 1099511627776/,
    );
    assert.match(summary, /pd\.kv\.pages: expected items from 0 to 4294967295 \(stored as UInt32\), got number 8589934592/);
    assert.deepEqual(
      out.deadLetters.map((d) => letter(d.value).field),
      ['span.start_time', Attr.generation, Attr.kvPages],
    );
  });

  it('without time limits takes spans of any storable time; with them, only those within the skew and the retention', () => {
    const spans = [
      holdAt('r-now', nowNs),
      holdAt('r-skew-edge', nowNs + HOUR_NS),
      holdAt('r-ahead', nowNs + HOUR_NS + 1n),
      holdAt('r-retention-edge', nowNs - 30n * DAY_NS),
      holdAt('r-old', nowNs - 30n * DAY_NS - 1n),
    ];
    assert.equal(triage(request(spans), LIMITS, receivedAt).accepted, 5);
    const out = triage(request(spans), { ...LIMITS, maxClockSkewMs: 3_600_000, retentionDays: 30 }, receivedAt);
    assert.equal(out.accepted, 3);
    assert.deepEqual(
      out.rejections.map((r) => [
        r.field,
        /clock skew of 3600000 ms/.test(r.reason) ? 'skew' : /retention/.test(r.reason) ? 'retention' : r.reason,
      ]),
      [
        ['span.start_time', 'skew'],
        ['span.start_time', 'retention'],
      ],
    );
    assert.deepEqual(
      out.deadLetters.map((d) => d.key),
      ['default/r-ahead', 'default/r-old'],
    );
  });

  it('takes the window from the time the request was received, and a missing limit from its default', () => {
    const span = holdAt('r', nowNs + 2n * HOUR_NS);
    assert.equal(triage(request([span]), { ...LIMITS, maxClockSkewMs: 3 * 3_600_000 }, receivedAt).accepted, 1);
    assert.equal(triage(request([span]), { ...LIMITS, maxClockSkewMs: 3_600_000 }, receivedAt).accepted, 0);
    // The default skew (1 hour) applies when only the retention is given.
    assert.equal(triage(request([span]), { ...LIMITS, retentionDays: 30 }, receivedAt).accepted, 0);
    assert.equal(triage(request([span]), { ...LIMITS, retentionDays: 30 }, new Date(receivedAt.getTime() + 3_600_000)).accepted, 1);
    // The default retention (30 days) applies when only the skew is given.
    const old = holdAt('r', nowNs - 31n * DAY_NS);
    assert.equal(triage(request([old]), { ...LIMITS, maxClockSkewMs: 3_600_000 }, receivedAt).accepted, 0);
    assert.equal(triage(request([old]), { ...LIMITS, maxClockSkewMs: 3_600_000, retentionDays: 32 }, receivedAt).accepted, 1);
  });
});
