/**
 * Fuzzed OTLP against `holdscope collector` as its own OS process (`node bin/holdscope.js collector`) on
 * librdkafka's mock Kafka cluster: random and mutated protobuf and JSON, wrong types for every field,
 * AnyValues nested thousands of levels deep, multi-megabyte strings, arrays and attribute lists, bodies at and
 * beyond --max-body-bytes, gzip/deflate/brotli bombs, wrong Content-Type and Content-Encoding, and a few
 * malformed HTTP requests on raw sockets.
 *
 * What must hold: no answer is 5xx; inputs that are certainly invalid get their documented 4xx (400, 413, 415,
 * 404, see docs/collector.md) with a non-empty reason; inputs built valid get 200; mutations that may or may
 * not stay valid get 200 or 4xx (the 200s are counted apart); the process is alive at the end, /healthz answers
 * 200 and a valid request's spans reach Kafka; its memory stays bounded (VmRSS sampled every 100 ms, and
 * VmHWM at the end, which also catches peaks between samples).
 *
 * The run is seeded: the seed is printed, and HOLDSCOPE_FUZZ_SEED=<seed> replays the same cases and mutations
 * (not byte for byte: the OpenTelemetry SDK draws its own span ids, and timestamps follow the clock). So every
 * input whose answer is wrong is also written to a directory named in the failure message, with its headers.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { brotliCompressSync, constants as zlibConstants, deflateSync, gzipSync } from 'node:zlib';
import type { Kafka } from 'kafkajs';
import { decodeOtlpProtobuf, encodeOtlpJson, encodeOtlpProtobuf, forEachSpan, type OtlpSpan } from '../../contract/index.ts';
import { procMemoryKb, sampleRss, spawnCollector, type CollectorProcess, type RssSampler } from '../support/collector-process.ts';
import {
  BYTE_MUTATIONS,
  captureSimulatorBodies,
  decodeResource,
  fuzzSeed,
  holdRequest,
  holdSpan,
  jsonDeepAnyValue,
  ld,
  mutateBytes,
  mutateJson,
  NOT_A_REQUEST_OBJECT,
  nowNs,
  pbDeepAnyValue,
  pbInt,
  pbKeyValue,
  pbRequest,
  pbString,
  randomJson,
  richRequest,
  Rng,
  statusMessage,
  varint,
  wrongTypeMutations,
} from '../support/fuzz-otlp.ts';
import { kafkaForTests, randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { readTopic } from '../support/kafka-read.ts';

/** --max-body-bytes of the collector under test: 4 MiB keeps "at the limit" bodies quick to build and send. */
const MAX_BODY = 4 * 1024 * 1024;
/** --max-spans-per-request (the default, spelled out because a case sits on each side of it). */
const MAX_SPANS = 50_000;
/** Requests in flight at once, and how many of them may be big (a megabyte or more before or after inflating). */
const CONCURRENCY = 12;
const BIG_CONCURRENCY = 3;
/**
 * The memory bound, on VmHWM of the collector process. Idle it holds about 160 MB (Node, tsx's loader, kafkajs,
 * express, prom-client). A request holds at most --max-body-bytes (4 MiB) of body; decoding it into objects, the
 * model's copy, and for rejected spans a dead letter, may fairly take ten to twenty times that while it works,
 * say 80 MB; with BIG_CONCURRENCY (3) such requests at once: 160 + 3 × 80 = 400 MB. The 256 MB bombs and the
 * 40 MB body must cost nothing near their size, and nesting is cut at 16 levels.
 */
const RSS_BOUND_MB = 400;

const PROTO = 'application/x-protobuf';
const JSON_TYPE = 'application/json';

type Expect =
  /** exactly this status, with a non-empty reason unless 200 */
  | { status: number }
  /** 200 or any 4xx: a mutation that may stay valid */
  | { maybeValid: true };

interface Case {
  category: string;
  what: string;
  /** Built when sent, so multi-megabyte bodies do not all sit in memory at once. */
  body: () => Buffer;
  headers: Record<string, string>;
  expect: Expect;
  method?: string;
  path?: string;
  big?: boolean;
}

interface Outcome {
  kase: Case;
  status: number;
  reason: string | undefined;
  error?: string;
}

const certain = (status: number): Expect => ({ status });
const MAYBE: Expect = { maybeValid: true };

/** Bytes of a hold request (protobuf or JSON) with `n` spans of fresh ids. */
function validHold(rng: Rng, encoding: 'protobuf' | 'json', n = 3) {
  const t = nowNs();
  const traceId = rng.hex(16);
  const spans = Array.from({ length: n }, (_, i) => holdSpan(`fz-${rng.hex(6)}`, rng.hex(8), traceId, t + BigInt(i)));
  const request = holdRequest(spans);
  return { spans, body: encoding === 'protobuf' ? Buffer.from(encodeOtlpProtobuf(request)) : Buffer.from(encodeOtlpJson(request)) };
}

/** A JSON hold request whose span carries more attributes: `entries`, KeyValues as raw JSON text, spliced in. */
function jsonHoldWithRawEntries(rng: Rng, entries: string, spanName = 'pd.hold'): { body: Buffer; spanId: string } {
  const span = holdSpan(`fz-${rng.hex(6)}`, rng.hex(8), rng.hex(16), nowNs());
  span.name = spanName;
  const text = encodeOtlpJson(holdRequest([span]));
  // The resource's attributes come first in the text: splice into the span's, the last "attributes" list.
  const marker = '"attributes":[';
  const at = text.lastIndexOf(marker) + marker.length;
  return { body: Buffer.from(`${text.slice(0, at)}${entries},${text.slice(at)}`), spanId: span.spanId };
}

/** The same with one attribute whose AnyValue is `valueJson` (raw JSON text, so any depth can be written). */
const jsonHoldWithRawAttribute = (rng: Rng, key: string, valueJson: string, spanName = 'pd.hold') =>
  jsonHoldWithRawEntries(rng, `{"key":${JSON.stringify(key)},"value":${valueJson}}`, spanName);

/** Resource KeyValues of a valid decode engine, written by hand. */
function pbDecodeResource(): Buffer[] {
  return Object.entries(decodeResource()).map(([k, v]) => pbKeyValue(k, typeof v === 'number' ? pbInt(v) : pbString(String(v))));
}

/** The span KeyValues a valid pd.hold needs, written by hand. */
function pbHoldAttributes(requestId: string): Buffer[] {
  const ints = (xs: number[]) => ld(5, Buffer.concat(xs.map((x) => ld(1, pbInt(x)))));
  return [
    pbKeyValue('pd.request.id', pbString(requestId)),
    pbKeyValue('pd.request.generation', pbInt(0)),
    pbKeyValue('pd.hold.expected_ranks', ints([0, 1])),
    pbKeyValue('pd.hold.timeout_ms', pbInt(30000)),
    pbKeyValue('pd.kv.slots', pbInt(64)),
    pbKeyValue('pd.kv.pages', ints([1, 2, 3, 4])),
  ];
}

function pbHoldWith(rng: Rng, extra: Buffer[], name = 'pd.hold'): { body: Buffer; spanId: string } {
  const spanId = rng.bytes(8);
  const body = pbRequest(pbDecodeResource(), {
    name,
    traceId: rng.bytes(16),
    spanId,
    startNs: nowNs(),
    attributes: [...pbHoldAttributes(`fz-${rng.hex(6)}`), ...extra],
  });
  return { body, spanId: spanId.toString('hex') };
}

/** `n` minimal spans (name only) in one ScopeSpans, as protobuf. */
function pbManySpans(n: number, name: string): Buffer {
  const one = ld(2, ld(5, name));
  const scopeSpans = Buffer.alloc(one.length * n);
  for (let i = 0; i < n; i++) one.copy(scopeSpans, i * one.length);
  return ld(1, ld(2, scopeSpans));
}

/** A valid body padded to exactly `size` bytes: JSON with trailing spaces, protobuf with an unknown field. */
function padTo(size: number, encoding: 'protobuf' | 'json', rng: Rng): Buffer {
  const { body } = validHold(rng, encoding, 1);
  if (encoding === 'json') return Buffer.concat([body, Buffer.alloc(size - body.length, 0x20)]);
  // Field 15 (unknown to ExportTraceServiceRequest), length-delimited: tag + length varint + payload.
  let payload = size - body.length - 1 - 4;
  for (;;) {
    const total = body.length + 1 + varint(payload).length + payload;
    if (total === size) break;
    payload += size - total;
  }
  return Buffer.concat([body, Buffer.from([(15 << 3) | 2]), varint(payload), Buffer.alloc(payload, 0x61)]);
}

/**
 * A pooled keep-alive connection the server closed as idle just as the client reused it fails with "other side
 * closed" before the server read a byte (a client-side race, frequent on a starved machine): the request is sent
 * once more on a new connection. A server that closes on this input closes again, and is reported.
 */
async function send(url: string, kase: Case): Promise<Outcome> {
  const first = await sendOnce(url, kase);
  return first.status === 0 && /other side closed/.test(first.error ?? '') ? sendOnce(url, kase) : first;
}

async function sendOnce(url: string, kase: Case): Promise<Outcome> {
  try {
    const res = await fetch(`${url}${kase.path ?? '/v1/traces'}`, {
      method: kase.method ?? 'POST',
      headers: kase.headers,
      body: (kase.method ?? 'POST') === 'GET' ? undefined : kase.body(),
      signal: AbortSignal.timeout(60_000),
    });
    const body = Buffer.from(await res.arrayBuffer());
    return { kase, status: res.status, reason: res.status === 200 ? undefined : statusMessage(body, res.headers.get('content-type')) };
  } catch (error) {
    return { kase, status: 0, reason: undefined, error: `${(error as Error).message} ${String((error as Error).cause ?? '')}` };
  }
}

/** Writes raw bytes on a fresh connection and resolves with the status of the first response line (0: none). */
function rawHttp(port: number, chunks: Buffer[], closeAfterWrite = false, timeoutMs = 15_000): Promise<number> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => finish(0), timeoutMs);
    const finish = (status: number) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(status);
    };
    socket.on('error', () => finish(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0)));
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m) finish(Number(m[1]));
    });
    socket.on('close', () => finish(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0)));
    socket.on('connect', () => {
      for (const c of chunks) socket.write(c);
      if (closeAfterWrite) socket.end();
    });
  });
}

describe('faults: collector fuzz (`holdscope collector` process, mock Kafka)', () => {
  let mock: KafkaMock;
  let kafka: Kafka;
  let collector: CollectorProcess;
  let rss: RssSampler;
  // Figures of the fuzz run, for the memory test after it.
  let fuzzHwmMb: number | undefined;
  let fuzzPeakMb = 0;
  const topic = randomTopic('fuzz-spans');
  const deadLetterTopic = `${topic}-dlq`;

  before(async () => {
    mock = await startKafkaMock({ brokers: 1 });
    kafka = kafkaForTests(mock.brokers);
    await mock.createTopic(topic, 4);
    await mock.createTopic(deadLetterTopic, 2);
    collector = await spawnCollector([
      '--kafka-brokers',
      mock.brokers.join(','),
      '--topic',
      topic,
      '--dead-letter-topic',
      deadLetterTopic,
      '--max-body-bytes',
      String(MAX_BODY),
      '--max-spans-per-request',
      String(MAX_SPANS),
    ]);
    rss = sampleRss(collector.pid, 100);
  });
  after(async () => {
    rss?.stop();
    await collector?.stop();
    await mock?.stop();
  });

  it(
    'answers the documented 4xx to invalid input and 200 to valid input, never 5xx, and lives on to deliver',
    { timeout: 300_000 },
    async (t) => {
      const started = Date.now();
      const seed = fuzzSeed();
      console.log(`faults: collector fuzz: seed ${seed} (HOLDSCOPE_FUZZ_SEED=${seed} replays the cases)`);
      const rng = new Rng(seed);

      // Seed corpus: what the OpenTelemetry SDK's exporters write for the simulator's spans, and the contract's encoders.
      const simProto = await captureSimulatorBodies('protobuf', 'mixed', seed % 1000, 30, 48);
      const simJson = await captureSimulatorBodies('json', 'late-write-bug', (seed % 1000) + 1, 10, 48);
      assert.ok(simProto.length >= 5 && simJson.length >= 5, `captured ${simProto.length} protobuf and ${simJson.length} JSON bodies`);
      const protoCorpus = [...simProto, ...Array.from({ length: 10 }, () => Buffer.from(encodeOtlpProtobuf(richRequest(rng))))];
      const jsonCorpus = [...simJson, ...Array.from({ length: 10 }, () => Buffer.from(encodeOtlpJson(richRequest(rng))))];
      t.diagnostic(`corpus: ${protoCorpus.length} protobuf bodies, ${jsonCorpus.length} JSON bodies`);

      const cases: Case[] = [];
      // A body built when sent gets an Rng of its own, drawn now, so a replay builds the same bytes whatever the timing.
      const add = (
        category: string,
        what: string,
        body: Buffer | ((r: Rng) => Buffer),
        headers: Record<string, string>,
        expect: Expect,
        big = false,
      ) => {
        const own = rng.next();
        cases.push({ category, what, body: typeof body === 'function' ? () => body(new Rng(own)) : () => body, headers, expect, big });
      };
      const proto = { 'content-type': PROTO };
      const json = { 'content-type': JSON_TYPE };

      // Random bytes. Field number 0 is illegal in protobuf, and no JSON text starts with these bytes: certainly invalid.
      for (let i = 0; i < 300; i++)
        add(
          'random protobuf',
          'field-0 tag + random bytes',
          Buffer.concat([Buffer.from([rng.int(8)]), rng.bytes(rng.size(8192))]),
          proto,
          certain(400),
        );
      for (let i = 0; i < 300; i++) {
        const first = rng.pick([0x00, 0x01, 0x7f, 0x78, 0x7d, 0x5d, 0x2c, 0x3a, 0x80 + rng.int(128)]);
        add(
          'random JSON',
          'non-JSON first byte + random bytes',
          Buffer.concat([Buffer.from([first]), rng.bytes(rng.size(8192))]),
          json,
          certain(400),
        );
      }
      for (let i = 0; i < 150; i++) add('random bytes', 'unprefixed, protobuf', rng.bytes(rng.size(4096)), proto, MAYBE);
      for (let i = 0; i < 150; i++) add('random bytes', 'unprefixed, JSON', rng.bytes(rng.size(4096)), json, MAYBE);

      // Mutated protobuf: one to three stacked mutations of an SDK or contract-encoded body.
      for (let i = 0; i < 1200; i++) {
        let body = rng.pick(protoCorpus);
        const kinds: string[] = [];
        for (let k = rng.range(1, 3); k > 0; k--) {
          const kind = rng.pick(BYTE_MUTATIONS);
          kinds.push(kind);
          body = mutateBytes(rng, body, kind, rng.pick(protoCorpus));
        }
        add('mutated protobuf', kinds.join('+'), body, proto, MAYBE);
      }
      // Mutated JSON, bytewise; truncated JSON (a strict prefix of an object is never JSON); structurally.
      for (let i = 0; i < 400; i++) {
        const kind = rng.pick(['bit-flip', 'insert', 'delete', 'duplicate', 'splice'] as const);
        add('mutated JSON bytes', kind, mutateBytes(rng, rng.pick(jsonCorpus), kind, rng.pick(jsonCorpus)), json, MAYBE);
      }
      for (let i = 0; i < 150; i++) {
        const base = rng.pick(jsonCorpus);
        assert.equal(base[0], 0x7b);
        add('truncated JSON', 'strict prefix', base.subarray(0, rng.int(base.length)), json, certain(400));
      }
      for (let i = 0; i < 600; i++) {
        let text = rng.pick(jsonCorpus).toString('utf8');
        for (let k = rng.range(1, 3); k > 0; k--) text = mutateJson(rng, text);
        add('mutated JSON structure', 'wrong type / removed / added / renamed', Buffer.from(text), json, MAYBE);
      }
      for (let i = 0; i < 100; i++)
        add('random JSON document', 'random value', Buffer.from(JSON.stringify({ resourceSpans: randomJson(rng, 4) })), json, MAYBE);
      // Wrong types for every field the OTLP JSON mapping defines: certainly invalid.
      const baseDoc = encodeOtlpJson(richRequest(rng));
      for (const m of wrongTypeMutations()) {
        const doc = JSON.parse(baseDoc) as Record<string, unknown>;
        m.apply(doc);
        add('JSON wrong type', m.what, Buffer.from(JSON.stringify(doc)), json, certain(400));
      }
      for (const doc of NOT_A_REQUEST_OBJECT) add('JSON wrong type', `document ${doc}`, Buffer.from(doc), json, certain(400));

      // Nesting. MAX_ANY_VALUE_DEPTH is 16: 16 levels are accepted (and re-encoded into Kafka), 17 and more are not.
      // (That those spans reach Kafka is checked at the end, when they are the newest messages: the mock drops a
      // partition's oldest messages past about 5 MB, and the multi-megabyte cases below would push them out.)
      for (const kind of ['array', 'kvlist'] as const) {
        add(
          'nesting',
          `JSON ${kind} 16 levels on a PD span`,
          jsonHoldWithRawAttribute(rng, 'deep', jsonDeepAnyValue(16, kind)).body,
          json,
          certain(200),
        );
        add(
          'nesting',
          `protobuf ${kind} 16 levels on a PD span`,
          pbHoldWith(rng, [pbKeyValue('deep', pbDeepAnyValue(16, kind))]).body,
          proto,
          certain(200),
        );
        for (const levels of [17, 100, 5000, 50_000]) {
          add(
            'nesting',
            `JSON ${kind} ${levels} levels`,
            jsonHoldWithRawAttribute(rng, 'deep', jsonDeepAnyValue(levels, kind)).body,
            json,
            certain(400),
            levels > 1000,
          );
        }
        for (const levels of [17, 100, 5000, 100_000, 250_000]) {
          add(
            'nesting',
            `protobuf ${kind} ${levels} levels`,
            (r) => pbHoldWith(r, [pbKeyValue('deep', pbDeepAnyValue(levels, kind))]).body,
            proto,
            certain(400),
            levels > 1000,
          );
        }
      }
      add(
        'nesting',
        'JSON [[[...]]] 1M levels',
        () => Buffer.from('['.repeat(1_000_000) + ']'.repeat(1_000_000)),
        json,
        certain(400),
        true,
      );
      // An unknown field, however deep, is ignored (OTLP/JSON receivers must ignore unknown fields): an empty request.
      add(
        'nesting',
        'JSON {"a":{"a":...}} 300k levels',
        () => Buffer.from('{"a":'.repeat(300_000) + '1' + '}'.repeat(300_000)),
        json,
        certain(200),
        true,
      );
      // Unknown groups nested without end (wire type 3 of an unknown field): protobufjs must stop, not recurse away.
      add('nesting', 'protobuf 1M nested unknown groups', () => Buffer.alloc(1_000_000, (2 << 3) | 3), proto, certain(400), true);

      // Huge strings, arrays, attribute counts, span counts: each built valid, so each must get 200 (or 413 past a limit).
      const mb3 = 3 * 1024 * 1024;
      add(
        'huge',
        '3 MB string attribute on a span not ours',
        (r) => jsonHoldWithRawAttribute(r, 'big', JSON.stringify({ stringValue: 'x'.repeat(mb3) }), 'http.request').body,
        json,
        certain(200),
        true,
      );
      add(
        'huge',
        '3 MB string attribute on a PD span (rejected into the dead letters)',
        (r) => jsonHoldWithRawAttribute(r, 'big', JSON.stringify({ stringValue: 'y'.repeat(mb3) })).body,
        json,
        certain(200),
        true,
      );
      add('huge', '3 MB PD span name (protobuf)', (r) => pbHoldWith(r, [], `pd.${'n'.repeat(mb3)}`).body, proto, certain(200), true);
      add(
        'huge',
        '3 MB bytes attribute (protobuf)',
        (r) => pbHoldWith(r, [pbKeyValue('blob', ld(7, r.bytes(mb3)))]).body,
        proto,
        certain(200),
        true,
      );
      add(
        'huge',
        'JSON array of 150k ints on a PD span',
        (r) =>
          jsonHoldWithRawAttribute(
            r,
            'x.pages',
            JSON.stringify({ arrayValue: { values: Array.from({ length: 150_000 }, (_, i) => ({ intValue: String(i) })) } }),
          ).body,
        json,
        certain(200),
        true,
      );
      add(
        'huge',
        'protobuf array of 900k ints',
        (r) => pbHoldWith(r, [pbKeyValue('ints', ld(5, Buffer.alloc(900_000 * 4, Buffer.from([0x0a, 0x02, 0x18, 0x01]))))]).body,
        proto,
        certain(200),
        true,
      );
      add(
        'huge',
        'protobuf array of 1.9M empty AnyValues',
        (r) => pbHoldWith(r, [pbKeyValue('empties', ld(5, Buffer.alloc(1_900_000 * 2, Buffer.from([0x0a, 0x00]))))]).body,
        proto,
        certain(200),
        true,
      );
      const jsonAttrs = (n: number) => Array.from({ length: n }, (_, i) => `{"key":"a${i}","value":{"intValue":"${i}"}}`).join(',');
      add('huge', 'JSON 70k attributes on a PD span', (r) => jsonHoldWithRawEntries(r, jsonAttrs(70_000)).body, json, certain(200), true);
      add(
        'huge',
        'JSON kvlist of 70k entries on a PD span',
        (r) => jsonHoldWithRawAttribute(r, 'map', `{"kvlistValue":{"values":[${jsonAttrs(70_000)}]}}`).body,
        json,
        certain(200),
        true,
      );
      add(
        'huge',
        'protobuf 200k attributes on a PD span',
        (r) =>
          pbHoldWith(
            r,
            Array.from({ length: 200_000 }, (_, i) => pbKeyValue(`a${i}`, pbInt(i))),
          ).body,
        proto,
        certain(200),
        true,
      );
      add(
        'huge',
        'protobuf 200k attributes on a span not ours',
        (r) =>
          pbHoldWith(
            r,
            Array.from({ length: 200_000 }, (_, i) => pbKeyValue(`a${i}`, pbInt(i))),
            'db.query',
          ).body,
        proto,
        certain(200),
        true,
      );
      add(
        'huge',
        `protobuf ${MAX_SPANS} spans not ours (at --max-spans-per-request)`,
        () => pbManySpans(MAX_SPANS, 'x'),
        proto,
        certain(200),
        true,
      );
      add(
        'huge',
        `protobuf ${MAX_SPANS + 1} spans (beyond --max-spans-per-request)`,
        () => pbManySpans(MAX_SPANS + 1, 'x'),
        proto,
        certain(413),
        true,
      );
      add('huge', `protobuf ${MAX_SPANS + 1} invalid PD spans`, () => pbManySpans(MAX_SPANS + 1, 'pd.hold'), proto, certain(413), true);
      add(
        'huge',
        'protobuf 400k empty ResourceSpans',
        () => Buffer.alloc(400_000 * 2, Buffer.from([0x0a, 0x00])),
        proto,
        certain(200),
        true,
      );

      // Body size at and beyond --max-body-bytes, plain and gzipped; decompression bombs.
      for (const encoding of ['protobuf', 'json'] as const) {
        const headers = encoding === 'protobuf' ? proto : json;
        add('body size', `${encoding} at the limit`, (r) => padTo(MAX_BODY, encoding, r), headers, certain(200), true);
        add('body size', `${encoding} one byte beyond`, (r) => padTo(MAX_BODY + 1, encoding, r), headers, certain(413), true);
        add(
          'body size',
          `${encoding} gzip inflating to the limit`,
          (r) => gzipSync(padTo(MAX_BODY, encoding, r)),
          { ...headers, 'content-encoding': 'gzip' },
          certain(200),
          true,
        );
        add(
          'body size',
          `${encoding} gzip inflating one byte beyond`,
          (r) => gzipSync(padTo(MAX_BODY + 1, encoding, r)),
          { ...headers, 'content-encoding': 'gzip' },
          certain(413),
          true,
        );
      }
      add('body size', '10x the limit', () => Buffer.alloc(10 * MAX_BODY, 0x0a), proto, certain(413), true);
      const bomb = gzipSync(Buffer.alloc(256 * 1024 * 1024), { level: 9 });
      add('bomb', 'gzip of 256 MB zeros', bomb, { ...proto, 'content-encoding': 'gzip' }, certain(413), true);
      add('bomb', 'gzip of 256 MB zeros as JSON', bomb, { ...json, 'content-encoding': 'gzip' }, certain(413), true);
      add(
        'bomb',
        'deflate of 256 MB zeros',
        deflateSync(Buffer.alloc(256 * 1024 * 1024), { level: 9 }),
        { ...proto, 'content-encoding': 'deflate' },
        certain(413),
        true,
      );
      add(
        'bomb',
        'brotli of 64 MB spaces',
        brotliCompressSync(Buffer.alloc(64 * 1024 * 1024, 0x20), { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 1 } }),
        { ...json, 'content-encoding': 'br' },
        certain(413),
        true,
      );
      add(
        'bomb',
        'gzip of a gzip bomb (decoded once: gzip bytes are no protobuf)',
        gzipSync(bomb),
        { ...proto, 'content-encoding': 'gzip' },
        certain(400),
      );

      // Content-Encoding.
      const small = validHold(rng, 'protobuf').body;
      for (let i = 0; i < 20; i++)
        add('encoding', 'corrupt gzip', rng.bytes(rng.size(2048)), { ...proto, 'content-encoding': 'gzip' }, certain(400));
      const gz = gzipSync(small);
      for (let i = 0; i < 10; i++)
        add(
          'encoding',
          'truncated gzip',
          gz.subarray(0, rng.range(1, gz.length - 9)),
          { ...proto, 'content-encoding': 'gzip' },
          certain(400),
        );
      add('encoding', 'gzip labelled deflate', gz, { ...proto, 'content-encoding': 'deflate' }, certain(400));
      for (const enc of ['compress', 'x-gzip', 'gzip, deflate', 'identity, gzip', 'snappy', 'lz4', 'gzipx', 'chunked', '*']) {
        add('encoding', `Content-Encoding ${enc}`, gzipSync(small), { ...proto, 'content-encoding': enc }, certain(415));
      }
      // Content-Type.
      for (const type of [
        'text/plain',
        'application/xml',
        'application/octet-stream',
        'application/protobuf',
        'application/x-protobufx',
        'application/jsonx',
        'application/grpc',
        'multipart/form-data; boundary=x',
        'application/x-www-form-urlencoded',
        'json',
        ' ',
        'application/json-seq',
      ]) {
        add('content type', `Content-Type ${JSON.stringify(type)}`, small, { 'content-type': type }, certain(415));
      }
      add('content type', 'no Content-Type', small, {}, certain(415));
      add('content type', 'protobuf body labelled JSON', small, json, MAYBE);
      add('content type', 'JSON body labelled protobuf', validHold(rng, 'json').body, proto, MAYBE);
      // Methods and paths.
      cases.push({
        category: 'route',
        what: 'GET /v1/traces',
        body: () => Buffer.alloc(0),
        headers: {},
        expect: certain(404),
        method: 'GET',
      });
      for (const path of ['/v1/metrics', '/v1/logs', '/v2/traces', '/', '/v1/traces/x'])
        cases.push({ category: 'route', what: `POST ${path}`, body: () => small, headers: proto, expect: certain(404), path });
      cases.push({ category: 'route', what: 'PUT /v1/traces', body: () => small, headers: proto, expect: certain(404), method: 'PUT' });

      rng.shuffle(cases);
      t.diagnostic(`${cases.length} requests built in ${((Date.now() - started) / 1000).toFixed(1)} s`);

      // Send: CONCURRENCY workers, at most BIG_CONCURRENCY big bodies in flight.
      const outcomes: Outcome[] = [];
      let bigInFlight = 0;
      const bigWaiters: (() => void)[] = [];
      const acquireBig = async () => {
        while (bigInFlight >= BIG_CONCURRENCY) await new Promise<void>((resolve) => bigWaiters.push(resolve));
        bigInFlight++;
      };
      const releaseBig = () => {
        bigInFlight--;
        bigWaiters.shift()?.();
      };
      let next = 0;
      const sendStarted = Date.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < cases.length) {
            const kase = cases[next++] as Case;
            if (kase.big) await acquireBig();
            try {
              outcomes.push(await send(collector.url, kase));
            } finally {
              if (kase.big) releaseBig();
            }
          }
        }),
      );
      t.diagnostic(`${outcomes.length} answers in ${((Date.now() - sendStarted) / 1000).toFixed(1)} s`);

      // Malformed HTTP on raw sockets: the server answers 4xx or closes, and lives on.
      const port = Number(new URL(collector.url).port);
      const rawHead = (extra: string) => Buffer.from(`POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: ${PROTO}\r\n${extra}\r\n`);
      const raw: { what: string; status: number; expect: number }[] = [];
      // body-parser reads a too-large body off to its end before answering 413, so the whole body is sent.
      raw.push({
        what: 'Content-Length limit+1',
        status: await rawHttp(port, [rawHead(`Content-Length: ${MAX_BODY + 1}\r\n`), Buffer.alloc(MAX_BODY + 1, 0x0a)]),
        expect: 413,
      });
      raw.push({ what: 'garbage request line', status: await rawHttp(port, [Buffer.from('\x00\x01garbage\r\n\r\n')]), expect: 400 });
      raw.push({
        what: '64 KB header',
        status: await rawHttp(port, [rawHead(`X-Big: ${'a'.repeat(64 * 1024)}\r\nContent-Length: 0\r\n`)]),
        expect: 431,
      });
      raw.push({
        what: 'two Content-Lengths',
        status: await rawHttp(port, [rawHead('Content-Length: 3\r\nContent-Length: 4\r\n'), Buffer.from('abcd')]),
        expect: 400,
      });
      raw.push({
        what: 'bad chunk size',
        status: await rawHttp(port, [rawHead('Transfer-Encoding: chunked\r\n'), Buffer.from('zz\r\nabc\r\n0\r\n\r\n')]),
        expect: 400,
      });
      // A client that goes away mid-body gets no answer; what matters is the process afterwards.
      await rawHttp(port, [rawHead('Content-Length: 1000000000000\r\n'), Buffer.alloc(1024 * 1024, 1)], true, 3000);
      await rawHttp(port, [rawHead('Content-Length: 100000\r\n'), Buffer.alloc(5000, 1)], true, 3000);
      await rawHttp(
        port,
        [
          rawHead('Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n'),
          Buffer.from(`1000\r\n${gzipSync(small).toString('latin1').slice(0, 20)}`),
        ],
        true,
        3000,
      );

      // The process survived, still serves, and still delivers.
      const alive = collector.alive();
      const health = await fetch(`${collector.url}/healthz`).then(
        (r) => r.status,
        (e: Error) => `failed: ${e.message}`,
      );
      // A valid request, and PD spans with an attribute nested 16 levels (accepted, so re-encoded into Kafka).
      const last = validHold(rng, 'protobuf', 5);
      const deepJson = jsonHoldWithRawAttribute(rng, 'deep', jsonDeepAnyValue(16, 'kvlist'));
      const deepPb = pbHoldWith(rng, [pbKeyValue('deep', pbDeepAnyValue(16, 'array'))]);
      const finalStatuses: (number | string)[] = [];
      for (const [body, headers] of [
        [last.body, proto],
        [deepJson.body, json],
        [deepPb.body, proto],
      ] as const) {
        finalStatuses.push(
          await fetch(`${collector.url}/v1/traces`, { method: 'POST', body, headers }).then(
            (r) => r.status,
            (e: Error) => `failed: ${e.message}`,
          ),
        );
      }
      const spanMessages = await readTopic(kafka, topic, 60_000);
      const inKafka = new Set<string>();
      for (const m of spanMessages) forEachSpan(decodeOtlpProtobuf(m.value), (span: OtlpSpan) => inKafka.add(span.spanId));
      const metrics = await collector.metrics().catch(() => new Map<string, number>());
      const memory = procMemoryKb(collector.pid);
      fuzzHwmMb = memory ? memory.hwm / 1024 : undefined;
      fuzzPeakMb = rss.peakKb() / 1024;

      // Verdicts.
      const byStatus = new Map<number, number>();
      for (const o of outcomes) byStatus.set(o.status, (byStatus.get(o.status) ?? 0) + 1);
      const maybeValid200 = outcomes.filter((o) => 'maybeValid' in o.kase.expect && o.status === 200);
      const fmt = (o: Outcome) =>
        `[${o.kase.category}] ${o.kase.what}: ${o.status}${o.error ? ` (${o.error})` : ''} ${JSON.stringify(o.reason?.slice(0, 160) ?? '')}`;
      const noAnswer = outcomes.filter((o) => o.status === 0);
      const fiveXx = outcomes.filter((o) => o.status >= 500);
      const wrong = outcomes.filter((o) => {
        if ('maybeValid' in o.kase.expect) return !(o.status === 200 || (o.status >= 400 && o.status < 500));
        if (o.status !== o.kase.expect.status) return true;
        return o.status !== 200 && !o.reason?.trim();
      });
      const statuses = [...byStatus]
        .sort((a, b) => a[0] - b[0])
        .map(([s, n]) => `${s}: ${n}`)
        .join(', ');
      console.log(
        `faults: collector fuzz: seed ${seed}, ${outcomes.length} requests (+${raw.length + 3} raw-socket), by status {${statuses}}, ` +
          `of which 200 for ${maybeValid200.length} mutations that stayed valid; raw-socket statuses [${raw.map((r) => r.status).join(',')}]; ` +
          `peak RSS ${fuzzPeakMb.toFixed(0)} MB sampled every 100 ms, VmHWM ${fuzzHwmMb?.toFixed(0) ?? '?'} MB (bound ${RSS_BOUND_MB} MB); ` +
          `500s counted by the collector ${metrics.get('holdscope_collector_requests_total{status="500"}') ?? 0}; ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );

      assert.ok(alive, collector.describe());
      assert.equal(health, 200, collector.describe());
      assert.deepEqual(finalStatuses, [200, 200, 200], collector.describe());
      for (const span of last.spans) assert.ok(inKafka.has(span.spanId), `span ${span.spanId} of the last valid request is in Kafka`);
      for (const id of [deepJson.spanId, deepPb.spanId]) assert.ok(inKafka.has(id), `span ${id} with a 16-level attribute is in Kafka`);
      const failed = [...new Set([...noAnswer, ...fiveXx, ...wrong])];
      let saved = '';
      if (failed.length > 0) {
        const dir = mkdtempSync(join(tmpdir(), `holdscope-fuzz-${seed}-`));
        failed.slice(0, 50).forEach((o, i) => {
          const name = `${String(i).padStart(2, '0')}-${o.kase.category.replace(/\W+/g, '-')}`;
          writeFileSync(join(dir, `${name}.body`), o.kase.body());
          writeFileSync(
            join(dir, `${name}.json`),
            JSON.stringify(
              {
                what: o.kase.what,
                method: o.kase.method ?? 'POST',
                path: o.kase.path ?? '/v1/traces',
                headers: o.kase.headers,
                expect: o.kase.expect,
                status: o.status,
                reason: o.reason,
                error: o.error,
              },
              null,
              2,
            ),
          );
        });
        saved = `; the inputs are in ${dir}`;
      }
      assert.deepEqual(noAnswer.map(fmt), [], `${noAnswer.length} requests got no answer (seed ${seed})${saved}`);
      assert.deepEqual(fiveXx.map(fmt), [], `${fiveXx.length} answers were 5xx (seed ${seed})${saved}`);
      assert.deepEqual(
        wrong.slice(0, 30).map(fmt),
        [],
        `${wrong.length} answers differ from what the input calls for (seed ${seed})${saved}`,
      );
      for (const r of raw) assert.equal(r.status, r.expect, `raw socket: ${r.what}`);
      assert.ok(collector.alive(), collector.describe());
    },
  );

  it(`keeps its memory bounded through the fuzz run: VmHWM under ${RSS_BOUND_MB} MB`, { timeout: 60_000 }, async () => {
    assert.ok(fuzzHwmMb !== undefined && collector.alive(), `the fuzz run ended with the process alive: ${collector.describe()}`);
    // What one request can cost, for the failure message: the body at the limit that expands most, sent alone.
    const rng = new Rng(1);
    const body = pbHoldWith(rng, [pbKeyValue('empties', ld(5, Buffer.alloc(1_900_000 * 2, Buffer.from([0x0a, 0x00]))))]).body;
    const before = (procMemoryKb(collector.pid)?.rss ?? NaN) / 1024;
    const sampler = sampleRss(collector.pid, 10);
    const res = await fetch(`${collector.url}/v1/traces`, { method: 'POST', body, headers: { 'content-type': PROTO } });
    await res.arrayBuffer();
    sampler.stop();
    const alone = `one ${(body.length / 1048576).toFixed(1)} MB protobuf request (a PD span whose attribute is an array of 1.9M empty AnyValues; answered ${res.status}) took the RSS from ${before.toFixed(0)} to ${(sampler.peakKb() / 1024).toFixed(0)} MB`;
    console.log(`faults: collector fuzz memory: VmHWM ${fuzzHwmMb.toFixed(0)} MB over the fuzz run; ${alone}`);
    // Fixed (it was a known bug): one request took 60 to 100 times its body in memory (protobufjs objects, the model's
    // copy, then the dead letter's JSON round trip). Now the decoder builds the model straight from the wire, stops
    // materializing a value past --max-attribute-length and attributes past --max-attributes, refuses (413) a request
    // whose decoded form would pass 16 × --max-body-bytes, and dead letters hold a shortened copy of the span.
    assert.ok(fuzzHwmMb < RSS_BOUND_MB, `collector VmHWM ${fuzzHwmMb.toFixed(0)} MB exceeds ${RSS_BOUND_MB} MB; ${alone}`);
  });

  it('keeps each Kafka message within the default message.max.bytes of a Kafka broker (1 MiB)', { timeout: 120_000 }, async () => {
    // The mock broker takes 20 MB messages; a Kafka broker by default refuses a message over message.max.bytes
    // (1048588 bytes) with MESSAGE_TOO_LARGE, which fails the whole send: every request batched with it is
    // answered 503, and the sender's retry brings the same span back. So the sizes are checked here. Each case
    // runs on a collector process of its own with fresh topics: the mock drops a partition's messages past
    // about 5 MB, so one message per topic is the way to see it whatever its size.
    const rng = new Rng(2);
    const messagesOf = async (body: Buffer, which: 'spans' | 'dead letters') => {
      const spans = randomTopic('fuzz-size');
      const dead = `${spans}-dlq`;
      await mock.createTopic(spans, 1);
      await mock.createTopic(dead, 1);
      const proc = await spawnCollector([
        '--kafka-brokers',
        mock.brokers.join(','),
        '--topic',
        spans,
        '--dead-letter-topic',
        dead,
        '--max-body-bytes',
        String(MAX_BODY),
      ]);
      try {
        const res = await fetch(`${proc.url}/v1/traces`, { method: 'POST', body, headers: { 'content-type': PROTO } });
        await res.arrayBuffer();
        assert.equal(res.status, 200, proc.describe());
        const messages = await readTopic(kafka, which === 'spans' ? spans : dead, 30_000);
        assert.ok(messages.length >= 1, `a message in the ${which}`);
        return messages;
      } finally {
        await proc.stop();
      }
    };
    const sizeOf = async (body: Buffer, which: 'spans' | 'dead letters'): Promise<number> => {
      const messages = await messagesOf(body, which);
      assert.equal(messages.length, 1, `one message in the ${which}`);
      return messages[0]!.value.length;
    };
    const mb = (n: number) => `${(n / 1048576).toFixed(1)} MB`;
    // A PD span rejected because an attribute is longer than --max-attribute-length (4096 items): 900k ints.
    const tooLong = pbHoldWith(rng, [pbKeyValue('x.pages', ld(5, Buffer.alloc(900_000 * 4, Buffer.from([0x0a, 0x02, 0x18, 0x01]))))]).body;
    // A PD span rejected for an unknown name of 3 MB: the reason quotes the name.
    const longName = pbHoldWith(rng, [], `pd.${'n'.repeat(3 * 1024 * 1024)}`).body;
    // A PD span with a 3 MB bytes attribute. It used to be accepted as a 3 MB message (the length limit covered
    // strings and arrays only); bytes values are limited now, so it is rejected and its dead letter is measured.
    const bytesAttr = pbHoldWith(rng, [pbKeyValue('blob', ld(7, rng.bytes(3 * 1024 * 1024)))]).body;
    // 400 valid PD spans of one lifecycle, each with a 4000-character attribute: 1.6 MB of spans under one key,
    // accepted, so they must be split over several messages with that key.
    const manySpans = (() => {
      const t = nowNs();
      const traceId = rng.hex(16);
      const spans = Array.from({ length: 400 }, (_, i) =>
        holdSpan('fz-split', rng.hex(8), traceId, t + BigInt(i), { 'x.note': 'n'.repeat(4000) }),
      );
      return { ids: new Set(spans.map((s) => s.spanId)), body: Buffer.from(encodeOtlpProtobuf(holdRequest(spans))) };
    })();
    const [tooLongDead, longNameDead, bytesDead, split] = await Promise.all([
      sizeOf(tooLong, 'dead letters'),
      sizeOf(longName, 'dead letters'),
      sizeOf(bytesAttr, 'dead letters'),
      messagesOf(manySpans.body, 'spans'),
    ]);
    const splitIds = new Set<string>();
    let splitSpans = 0;
    for (const m of split) {
      forEachSpan(decodeOtlpProtobuf(m.value), (span: OtlpSpan) => {
        splitIds.add(span.spanId);
        splitSpans++;
      });
    }
    const sizes = [
      `dead letter of a PD span rejected for a 900k-item array attribute (request ${mb(tooLong.length)}): ${mb(tooLongDead)}`,
      `dead letter of a PD span rejected for its 3 MB unknown name: ${mb(longNameDead)}`,
      `dead letter of a PD span rejected for a 3 MB bytes attribute: ${mb(bytesDead)}`,
      `${split.length} pd-spans messages of one lifecycle's 400 spans (request ${mb(manySpans.body.length)}): ${split.map((m) => mb(m.value.length)).join(', ')}`,
    ].join('; ');
    console.log(`faults: collector fuzz message sizes: ${sizes}`);
    // Fixed (it was a known bug): the dead letter carried the whole over-long value and a reason quoting it, and
    // bytes values, key-value lists and attribute counts were not limited, so nothing bounded a message. Now every
    // message stays within --max-message-bytes (1000000 by default): dead letters hold a shortened copy and
    // reasons quote at most the start of a value; a lifecycle's spans are split over messages with the same key.
    for (const size of [tooLongDead, longNameDead, bytesDead, ...split.map((m) => m.value.length)])
      assert.ok(size <= 1_048_588, `a message over 1 MiB: ${sizes}`);
    assert.ok(split.length >= 2, `one lifecycle's 1.6 MB of spans went into several messages: ${sizes}`);
    assert.deepEqual(new Set(split.map((m) => m.key)), new Set([split[0]!.key]), 'every message of the lifecycle has its key');
    assert.deepEqual(splitIds, manySpans.ids, 'every span of the lifecycle is in Kafka');
    assert.equal(splitSpans, manySpans.ids.size, 'and only once');
  });
});
