import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConfigError, createLogger, success, type RetryableResult } from '../common/index.ts';
import {
  encodeOtlpJson,
  encodeOtlpProtobuf,
  ResourceAttr,
  type AttrMap,
  type AttrValue,
  type OtlpSpan,
  type OtlpTraceRequest,
} from '../contract/index.ts';
import { Collector } from './collector.ts';
import { collectorConfigSchema, loadCollectorConfig } from './config.ts';
import type { DeadLetter, SpanMessage, SpanQueue } from '../contract/index.ts';

/** Keeps what it is given; healthy as told. */
class MemoryQueue implements SpanQueue {
  readonly messages: SpanMessage[] = [];
  readonly deadLetters: DeadLetter[] = [];
  up = true;
  async start(): Promise<void> {}
  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    this.messages.push(...messages);
    this.deadLetters.push(...deadLetters);
    return Promise.resolve(success(undefined));
  }
  healthy(): boolean {
    return this.up;
  }
  async flush(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

function attrs(entries: Record<string, AttrValue>): AttrMap {
  const map: AttrMap = Object.create(null);
  for (const [k, v] of Object.entries(entries)) map[k] = v;
  return map;
}

const RESOURCE = attrs({
  [ResourceAttr.role]: 'decode',
  [ResourceAttr.engineId]: 'd',
  [ResourceAttr.engineVersion]: 'v1',
  [ResourceAttr.transferBackend]: 'nixl',
  [ResourceAttr.kvCapacitySlots]: 10,
});

/** A minute ago, in whole milliseconds: within the collector's clock skew and retention (1 hour, 30 days). */
const T0 = BigInt(Date.now() - 60_000) * 1_000_000n;

let counter = 0;
function hold(requestId: string, extra: Record<string, AttrValue> = {}, name = 'pd.hold'): OtlpSpan {
  const n = ++counter;
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: n.toString(16).padStart(16, '0'),
    parentSpanId: '',
    name,
    kind: 1,
    startTimeUnixNano: T0,
    endTimeUnixNano: T0 + 1_000_000n,
    attributes: attrs({
      'pd.request.id': requestId,
      'pd.request.generation': 0,
      'pd.hold.expected_ranks': [0],
      'pd.hold.timeout_ms': 1000,
      'pd.kv.slots': 1,
      'pd.kv.pages': [1],
      ...extra,
    }),
    statusCode: 0,
    statusMessage: '',
  };
}

const request = (spans: OtlpSpan[]): OtlpTraceRequest => ({
  resourceSpans: [{ resource: RESOURCE, scopeSpans: [{ scope: { name: 't', version: '1' }, spans }] }],
});

describe('collector HTTP limits', () => {
  const queue = new MemoryQueue();
  let collector: Collector;
  let url: string;
  before(async () => {
    const config = collectorConfigSchema.parse({
      port: 0,
      host: '127.0.0.1',
      maxBodyBytes: 1024 * 1024,
      maxSpansPerRequest: 100,
      maxMessageBytes: 65_536,
    });
    collector = new Collector(config, { queue, log: createLogger('test', 'silent') });
    url = `http://127.0.0.1:${await collector.start()}`;
  });
  after(() => collector.shutdown());

  const post = async (body: Buffer | string, type: 'json' | 'protobuf') => {
    const res = await fetch(`${url}/v1/traces`, {
      method: 'POST',
      body,
      headers: { 'content-type': type === 'json' ? 'application/json' : 'application/x-protobuf' },
    });
    return { status: res.status, text: Buffer.from(await res.arrayBuffer()).toString('utf8') };
  };

  it('answers 413 to more spans than --max-spans-per-request, in both encodings, before building them', async () => {
    const spans = Array.from({ length: 101 }, (_, i) => hold(`r${i}`));
    for (const [body, type] of [
      [Buffer.from(encodeOtlpProtobuf(request(spans))), 'protobuf'],
      [encodeOtlpJson(request(spans)), 'json'],
    ] as const) {
      const res = await post(body, type);
      assert.equal(res.status, 413);
      assert.match(res.text, /more than 100 spans in one request; the limit is 100/);
    }
  });

  it('answers 413 to a body that would take more than 16 times --max-body-bytes once decoded', async () => {
    // 900 kB of empty key-value lists in arrays: each a few bytes on the wire, a couple of hundred bytes decoded.
    const kv = Buffer.from([0x0a, 0x02, 0x32, 0x00]);
    const array = (n: number) => Buffer.concat([Buffer.from([0x2a]), varint(n * 4), Buffer.alloc(n * 4, kv)]);
    const attribute = (key: string) => wrap(9, Buffer.concat([wrap(1, Buffer.from(key)), wrap(2, array(4000))]));
    const span = wrap(2, Buffer.concat([wrap(5, Buffer.from('pd.hold')), ...Array.from({ length: 56 }, (_, i) => attribute(`k${i}`))]));
    const body = wrap(1, wrap(2, span));
    assert.ok(body.length < 1024 * 1024);
    const res = await post(body, 'protobuf');
    assert.equal(res.status, 413);
    assert.match(res.text, /more than 16 MiB of memory once decoded/);
  });

  it('keeps error reasons short however long the input they quote', async () => {
    const key = 'k'.repeat(200_000);
    const res = await post(
      `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"pd.hold","attributes":[{"key":"${key}","value":"plain"}]}]}]}]}`,
      'json',
    );
    assert.equal(res.status, 400);
    assert.ok(res.text.length < 2200, `${res.text.length} characters`);
    assert.match(res.text, /attributes\[\\"k+… \(200000 characters\)\\"\]: expected an object/);
  });

  it('rejects what breaks the limits as partial success, and keeps every message within --max-message-bytes', async () => {
    queue.messages.length = 0;
    queue.deadLetters.length = 0;
    const big = Array.from({ length: 40 }, () => hold('r-big', { 'x.note': 'n'.repeat(3000) }));
    const tooLarge = hold('r-huge', Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`x${i}`, 'y'.repeat(4000)])));
    const blob = hold('r-blob', { blob: new Uint8Array(10_000) });
    const res = await post(Buffer.from(encodeOtlpProtobuf(request([...big, tooLarge, blob]))), 'protobuf');
    assert.equal(res.status, 200);
    assert.match(
      res.text,
      /2 PD span\(s\) rejected: pd\.hold: the span takes \d+ bytes in a Kafka message.*; pd\.hold: blob: 10000 bytes, more than the limit of 4096/,
    );
    assert.ok(queue.messages.length >= 2);
    assert.equal(
      queue.messages.reduce((n, m) => n + m.spans, 0),
      40,
    );
    for (const m of [...queue.messages, ...queue.deadLetters]) assert.ok(m.value.length < 65_536, `${m.value.length} bytes`);
    assert.equal(queue.deadLetters.length, 2);
  });

  it('rejects, naming the field, what cannot be stored and what lies outside the clock skew or the retention', async () => {
    queue.messages.length = 0;
    queue.deadLetters.length = 0;
    const at = (span: OtlpSpan, ns: bigint): OtlpSpan => ({ ...span, startTimeUnixNano: ns, endTimeUnixNano: ns });
    const nowNs = BigInt(Date.now()) * 1_000_000n;
    const spans = [
      at(hold('r-2300'), 10_413_792_000_000_000_000n),
      at(hold('r-ahead'), nowNs + 2n * 3_600_000_000_000n),
      at(hold('r-old'), nowNs - 31n * 86_400_000_000_000n),
      hold('r-rank', { 'pd.hold.expected_ranks': [0, 2 ** 32] }),
      hold('r-fine'),
    ];
    for (const [body, type] of [
      [Buffer.from(encodeOtlpProtobuf(request(spans))), 'protobuf'],
      [encodeOtlpJson(request(spans)), 'json'],
    ] as const) {
      const res = await post(body, type);
      assert.equal(res.status, 200);
      assert.match(
        res.text,
        /4 PD span\(s\) rejected: pd\.hold: span\.start_time: 2300-01-01T00:00:00\.000000000Z is later than 2106-02-07T06:28:15\.999999999Z, the last time holdscope can store; pd\.hold: span\.start_time: .* is more than the allowed clock skew of 3600000 ms ahead of the receiver's clock .*; pd\.hold: span\.start_time: .* the oldest time kept \(the retention\) \(and 1 more\)/,
      );
    }
    assert.equal(
      queue.messages.reduce((n, m) => n + m.spans, 0),
      2,
    );
    assert.deepEqual(
      queue.deadLetters.map((d) => (JSON.parse(d.value.toString()) as { field: string }).field),
      [
        'span.start_time',
        'span.start_time',
        'span.start_time',
        'pd.hold.expected_ranks',
        'span.start_time',
        'span.start_time',
        'span.start_time',
        'pd.hold.expected_ranks',
      ],
    );
  });

  it('is ready only while the queue is healthy', async () => {
    queue.up = false;
    assert.equal((await fetch(`${url}/readyz`)).status, 503);
    queue.up = true;
    assert.equal((await fetch(`${url}/readyz`)).status, 200);
  });
});

describe('collector configuration', () => {
  it('has bounded defaults', () => {
    const config = loadCollectorConfig({}, {});
    assert.equal(config.maxBodyBytes, 4 * 1024 * 1024);
    assert.equal(config.maxMessageBytes, 1_000_000);
    assert.equal(config.maxAttributes, 128);
    assert.equal(config.maxPendingBytes, 64 * 1024 * 1024);
    assert.equal(config.maxClockSkewMs, 3_600_000);
    assert.equal(config.retentionDays, 30);
  });

  it('names the flag, the expectation and the value given', () => {
    assert.throws(
      () => loadCollectorConfig({ maxMessageBytes: '100' }, {}),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /--max-message-bytes: expected an integer >= 16384 \(bytes\), got "100"/);
        return true;
      },
    );
    assert.throws(() => loadCollectorConfig({ maxAttributes: '0' }, {}), /--max-attributes: expected an integer >= 1, got "0"/);
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
