/**
 * Building blocks for fuzzing OTLP/HTTP receivers: a seeded RNG, valid PD span requests built with the
 * contract's names, captured OpenTelemetry SDK bodies from the simulator, byte-level mutators (with a
 * protobuf walker that finds length prefixes to corrupt), JSON wrong-type mutators, hand-written protobuf
 * for what the contract's encoder refuses to write (AnyValues nested thousands of levels deep), and a reader
 * of the google.rpc.Status an error answer carries.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Attr, ResourceAttr, SpanName, type AttrMap, type OtlpSpan, type OtlpTraceRequest } from '../../contract/index.ts';
import { Rng as SimRng } from '../../common/index.ts';
import { buildScenario, runSimulation, type ScenarioName } from '../../emitter/index.ts';

// ---------------------------------------------------------------------------------------------------------
// Seeded randomness

/** The simulator's seeded generator, with the draws fuzzing needs: the same sequence for the same seed everywhere. */
export class Rng {
  private readonly source: SimRng;

  constructor(readonly seed: number) {
    this.source = new SimRng(seed);
  }

  /** A uniform 32-bit unsigned integer. */
  next(): number {
    return this.source.uint32();
  }

  float(): number {
    return this.source.next();
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.float() * n);
  }

  /** An integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return this.source.int(lo, hi);
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick from nothing');
    return items[this.int(items.length)] as T;
  }

  bytes(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) out[i] = this.next() & 0xff;
    return out;
  }

  hex(nBytes: number): string {
    return this.bytes(nBytes).toString('hex');
  }

  /** A size skewed towards small values: mostly under 1 KiB, sometimes up to `max`. */
  size(max: number): number {
    const bits = this.int(Math.max(1, Math.floor(Math.log2(max))) + 1);
    return Math.min(max, this.int(2 ** bits) + 1);
  }

  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j] as T, items[i] as T];
    }
    return items;
  }
}

/** The seed from HOLDSCOPE_FUZZ_SEED when set (to replay a run), else a fresh one. */
export function fuzzSeed(): number {
  const given = process.env.HOLDSCOPE_FUZZ_SEED;
  if (given !== undefined && given !== '') {
    const n = Number(given);
    if (!Number.isSafeInteger(n) || n < 0 || n > 0xffffffff)
      throw new RangeError(`HOLDSCOPE_FUZZ_SEED: expected an integer in 0..2^32-1, got ${given}`);
    return n;
  }
  return randomBytes(4).readUInt32BE(0);
}

// ---------------------------------------------------------------------------------------------------------
// Valid requests

/** A decode engine's resource that satisfies the contract. */
export function decodeResource(engineId = 'decode-fuzz'): AttrMap {
  return {
    [ResourceAttr.role]: 'decode',
    [ResourceAttr.engineId]: engineId,
    [ResourceAttr.engineVersion]: 'v1',
    [ResourceAttr.transferBackend]: 'mooncake',
    [ResourceAttr.kvCapacitySlots]: 1000,
  };
}

/** A `pd.hold` span that satisfies the contract, at `startNs`, with extra attributes merged in. */
export function holdSpan(requestId: string, spanId: string, traceId: string, startNs: bigint, extra: AttrMap = {}): OtlpSpan {
  return {
    traceId,
    spanId,
    parentSpanId: '',
    name: SpanName.hold,
    kind: 1,
    startTimeUnixNano: startNs,
    endTimeUnixNano: startNs + 1_000_000n,
    attributes: {
      [Attr.requestId]: requestId,
      [Attr.generation]: 0,
      [Attr.holdExpectedRanks]: [0, 1],
      [Attr.holdTimeoutMs]: 30000,
      [Attr.kvSlots]: 64,
      [Attr.kvPages]: [1, 2, 3, 4],
      ...extra,
    },
    statusCode: 0,
    statusMessage: '',
  };
}

/** Wall-clock now in Unix nanoseconds (spans older than the table's TTL would be dropped by ClickHouse). */
export const nowNs = (): bigint => BigInt(Date.now()) * 1_000_000n;

/** One request of `pd.hold` spans under one decode resource. */
export function holdRequest(spans: OtlpSpan[], resource: AttrMap = decodeResource()): OtlpTraceRequest {
  return { resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 'fuzz', version: '1' }, spans }] }] };
}

/**
 * A request whose spans carry every AnyValue kind, a parent span id, a status with a message, and a span
 * that is not ours: the base that JSON wrong-type mutations start from, so every field they target exists.
 */
export function richRequest(rng: Rng): OtlpTraceRequest {
  const t = nowNs();
  const traceId = rng.hex(16);
  const hold = holdSpan(`rich-${rng.hex(4)}`, rng.hex(8), traceId, t, {
    'x.string': 'text',
    'x.int': 42,
    'x.big': 2n ** 60n,
    'x.bool': true,
    'x.double': 1.5,
    'x.bytes': new Uint8Array([1, 2, 3]),
    'x.array': ['a', 1, false],
    'x.kvlist': { inner: 'v', n: 7 },
  });
  hold.parentSpanId = rng.hex(8);
  hold.statusCode = 2;
  hold.statusMessage = 'boom';
  const other: OtlpSpan = { ...hold, spanId: rng.hex(8), name: 'http.request', attributes: { 'http.method': 'GET' } };
  return holdRequest([hold, other], { ...decodeResource(), 'service.name': 'fuzz' });
}

// ---------------------------------------------------------------------------------------------------------
// Bodies the OpenTelemetry SDK exporters write, from the simulator

/**
 * Runs a small simulation against a local HTTP server that answers 200 and keeps every request body: real
 * OTLP protobuf (or JSON) as the SDK's exporters write it, spans of every PD kind included.
 */
export async function captureSimulatorBodies(
  encoding: 'protobuf' | 'json',
  scenario: ScenarioName,
  seed: number,
  requests: number,
  batchSize = 64,
): Promise<Buffer[]> {
  const bodies: Buffer[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks));
      const json = (req.headers['content-type'] ?? '').includes('json');
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' });
      res.end(json ? '{}' : undefined);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const { config } = buildScenario(scenario, seed);
    config.requests = requests;
    config.idPrefix = `fuzz-${encoding}-${seed}`;
    const summary = await runSimulation({
      config,
      endpoint: url,
      startTimeMs: Date.now() - 60_000,
      pace: 'fast',
      batchSize,
      ...(encoding === 'json' ? { exporterFor: () => new JsonExporter({ url: `${url}/v1/traces` }) } : {}),
    });
    if (summary.spansFailed > 0) throw new Error(`capturing simulator bodies: ${summary.spansFailed} spans failed to export`);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  return bodies;
}

// ---------------------------------------------------------------------------------------------------------
// Protobuf by hand

export function varint(n: number | bigint): Buffer {
  let v = BigInt(n);
  if (v < 0n) v = BigInt.asUintN(64, v);
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return Buffer.from(out);
}

/** A length-delimited field (wire type 2). */
export const ld = (field: number, payload: Buffer | string): Buffer => {
  const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  return Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
};
/** A varint field (wire type 0). */
export const vf = (field: number, n: number | bigint): Buffer => Buffer.concat([varint(field << 3), varint(n)]);
/** A fixed64 field (wire type 1). */
export const f64 = (field: number, n: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(n);
  return Buffer.concat([varint((field << 3) | 1), b]);
};

/** KeyValue { key = 1, value = 2 } */
export const pbKeyValue = (key: string, anyValue: Buffer): Buffer => Buffer.concat([ld(1, key), ld(2, anyValue)]);

/**
 * ExportTraceServiceRequest with one resource (its KeyValues given) and one span (name, ids, times, and the
 * KeyValues given as its attributes), written field by field.
 */
export function pbRequest(
  resourceKvs: Buffer[],
  span: { name: string; traceId: Buffer; spanId: Buffer; startNs: bigint; attributes: Buffer[] },
): Buffer {
  const spanBytes = Buffer.concat([
    ld(1, span.traceId),
    ld(2, span.spanId),
    ld(5, span.name),
    vf(6, 1),
    f64(7, span.startNs),
    f64(8, span.startNs + 1000n),
    ...span.attributes.map((kv) => ld(9, kv)),
  ]);
  const scopeSpans = Buffer.concat([ld(1, ld(1, 'fuzz')), ld(2, spanBytes)]);
  const resource = Buffer.concat(resourceKvs.map((kv) => ld(1, kv)));
  const resourceSpans = Buffer.concat([ld(1, resource), ld(2, scopeSpans)]);
  return ld(1, resourceSpans);
}

/** AnyValue { string_value = 1 } */
export const pbString = (s: string): Buffer => ld(1, s);
/** AnyValue { int_value = 3 } */
export const pbInt = (n: number | bigint): Buffer => vf(3, n);

/**
 * An AnyValue nested `levels` deep: arrays (`array_value` 5 → ArrayValue.values 1) or key-value lists
 * (`kvlist_value` 6 → KeyValueList.values 1 → KeyValue.value 2), around an int. Written back to front into
 * one buffer, so a million levels cost one pass. `levels` counts the arrays/lists around the innermost value.
 */
export function pbDeepAnyValue(levels: number, kind: 'array' | 'kvlist'): Buffer {
  const inner = pbInt(1);
  // Upper bound per level: two tags (1 byte each, 3 for kvlist with its key), two varints of at most 5 bytes.
  const perLevel = kind === 'array' ? 12 : 22;
  const buf = Buffer.alloc(inner.length + levels * perLevel);
  let pos = buf.length - inner.length;
  inner.copy(buf, pos);
  const end = buf.length;
  const prepend = (bytes: Buffer) => {
    pos -= bytes.length;
    bytes.copy(buf, pos);
  };
  for (let i = 0; i < levels; i++) {
    if (kind === 'array') {
      prepend(varint(end - pos)); // ArrayValue.values (1) holding the AnyValue below
      prepend(Buffer.from([(1 << 3) | 2]));
      prepend(varint(end - pos)); // AnyValue.array_value (5)
      prepend(Buffer.from([(5 << 3) | 2]));
    } else {
      prepend(varint(end - pos)); // KeyValue.value (2)
      prepend(Buffer.from([(2 << 3) | 2]));
      prepend(Buffer.from([(1 << 3) | 2, 1, 0x6b])); // KeyValue.key (1) = "k"
      prepend(varint(end - pos)); // KeyValueList.values (1)
      prepend(Buffer.from([(1 << 3) | 2]));
      prepend(varint(end - pos)); // AnyValue.kvlist_value (6)
      prepend(Buffer.from([(6 << 3) | 2]));
    }
  }
  return Buffer.from(buf.subarray(pos));
}

/** A JSON AnyValue nested `levels` deep (arrays or key-value lists) around an int. */
export function jsonDeepAnyValue(levels: number, kind: 'array' | 'kvlist'): string {
  const open = kind === 'array' ? '{"arrayValue":{"values":[' : '{"kvlistValue":{"values":[{"key":"k","value":';
  const close = kind === 'array' ? ']}}' : '}]}}';
  return open.repeat(levels) + '{"intValue":"1"}' + close.repeat(levels);
}

// ---------------------------------------------------------------------------------------------------------
// A protobuf walker: where the length prefixes are

function readVarint(buf: Buffer, pos: number, end: number): [value: number, next: number] | undefined {
  let value = 0;
  let shift = 0;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) return undefined;
    const byte = buf[pos++] as number;
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if ((byte & 0x80) === 0) return [value, pos];
  }
  return undefined;
}

export interface LengthPrefix {
  /** Where the length varint starts and ends (exclusive). */
  at: number;
  end: number;
  length: number;
}

/**
 * The length prefixes of every length-delimited field in `buf`, descending into payloads that parse as
 * messages themselves (strings that happen to parse are included too: all are fair game for corruption).
 */
export function lengthPrefixes(buf: Buffer, maxDepth = 40): LengthPrefix[] {
  const out: LengthPrefix[] = [];
  const walk = (start: number, end: number, depth: number, into: LengthPrefix[]): boolean => {
    let pos = start;
    while (pos < end) {
      const tag = readVarint(buf, pos, end);
      if (!tag || tag[0] >>> 3 === 0) return false;
      pos = tag[1];
      switch (tag[0] & 7) {
        case 0: {
          const v = readVarint(buf, pos, end);
          if (!v) return false;
          pos = v[1];
          break;
        }
        case 1:
          pos += 8;
          break;
        case 5:
          pos += 4;
          break;
        case 2: {
          const len = readVarint(buf, pos, end);
          if (!len || len[1] + len[0] > end) return false;
          into.push({ at: pos, end: len[1], length: len[0] });
          if (depth < maxDepth && len[0] > 0) {
            const nested: LengthPrefix[] = [];
            if (walk(len[1], len[1] + len[0], depth + 1, nested)) into.push(...nested);
          }
          pos = len[1] + len[0];
          break;
        }
        default:
          return false;
      }
    }
    return pos === end;
  };
  walk(0, buf.length, 0, out);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Byte mutators

export type ByteMutation = 'bit-flip' | 'truncate' | 'insert' | 'delete' | 'duplicate' | 'varint-length' | 'overlong-varint' | 'splice';

export function mutateBytes(rng: Rng, input: Buffer, kind: ByteMutation, other?: Buffer): Buffer {
  const buf = Buffer.from(input);
  const len = buf.length;
  switch (kind) {
    case 'bit-flip': {
      const flips = rng.range(1, 8);
      for (let i = 0; i < flips && len > 0; i++) {
        const at = rng.int(len);
        buf[at] = (buf[at] as number) ^ (1 << rng.int(8));
      }
      return buf;
    }
    case 'truncate':
      return buf.subarray(0, rng.int(len));
    case 'insert': {
      const at = rng.int(len + 1);
      return Buffer.concat([buf.subarray(0, at), rng.bytes(rng.range(1, 16)), buf.subarray(at)]);
    }
    case 'delete': {
      if (len === 0) return buf;
      const at = rng.int(len);
      return Buffer.concat([buf.subarray(0, at), buf.subarray(Math.min(len, at + rng.range(1, 16)))]);
    }
    case 'duplicate': {
      if (len === 0) return buf;
      const at = rng.int(len);
      const piece = buf.subarray(at, Math.min(len, at + rng.range(1, 64)));
      const to = rng.int(len + 1);
      return Buffer.concat([buf.subarray(0, to), piece, buf.subarray(to)]);
    }
    case 'splice': {
      const from = other ?? buf;
      const a = rng.int(len + 1);
      const b = rng.int(from.length + 1);
      return Buffer.concat([buf.subarray(0, a), from.subarray(b)]);
    }
    case 'varint-length':
    case 'overlong-varint': {
      const prefixes = lengthPrefixes(buf);
      if (prefixes.length === 0) return mutateBytes(rng, buf, 'bit-flip');
      const p = rng.pick(prefixes);
      let replacement: Buffer;
      if (kind === 'overlong-varint') {
        // Same value, padded with continuation bytes (valid protobuf up to 10 bytes), or an endless varint.
        replacement = rng.chance(0.5)
          ? Buffer.concat([Buffer.from(varint(p.length).map((b) => b | 0x80)), Buffer.from([0x80, 0x00])])
          : Buffer.alloc(rng.range(10, 16), 0xff);
      } else {
        const candidates = [
          p.length + 1,
          Math.max(0, p.length - 1),
          0,
          p.length + rng.range(2, 4096),
          0x7fffffff,
          0xffffffff,
          2 ** 35 + p.length,
          rng.int(2 ** 31),
        ];
        replacement = varint(rng.pick(candidates));
      }
      return Buffer.concat([buf.subarray(0, p.at), replacement, buf.subarray(p.end)]);
    }
  }
}

export const BYTE_MUTATIONS: readonly ByteMutation[] = [
  'bit-flip',
  'truncate',
  'insert',
  'delete',
  'duplicate',
  'varint-length',
  'overlong-varint',
  'splice',
];

// ---------------------------------------------------------------------------------------------------------
// JSON mutators

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A random JSON value of bounded depth and size. */
export function randomJson(rng: Rng, depth = 3): Json {
  const kind = rng.int(depth > 0 ? 8 : 6);
  switch (kind) {
    case 0:
      return null;
    case 1:
      return rng.chance(0.5);
    case 2:
      return rng.pick([0, -1, 1.5, 1e308, -1e-308, 2 ** 53 + 1, 2 ** 64, Number.MAX_SAFE_INTEGER, 0x7fffffff + 1]);
    case 3:
      return rng.pick([
        '',
        'x',
        'zz',
        '0',
        '-1',
        '1.5',
        'NaN',
        'Infinity',
        '18446744073709551616',
        'SPAN_KIND_SERVER',
        'AAEC',
        '0123456789abcdef',
        '\u0000',
        '\ud800',
        'é',
      ]);
    case 4:
      return rng.bytes(rng.range(0, 24)).toString('latin1');
    case 5:
      return rng.hex(rng.range(0, 17));
    case 6:
      return Array.from({ length: rng.range(0, 4) }, () => randomJson(rng, depth - 1));
    default: {
      const o: Record<string, Json> = {};
      const keys = [
        'stringValue',
        'intValue',
        'values',
        'key',
        'value',
        'spans',
        'name',
        'attributes',
        'kvlistValue',
        'arrayValue',
        '__proto__',
        'constructor',
        'x',
      ];
      for (let i = rng.range(0, 4); i > 0; i--) o[rng.pick(keys)] = randomJson(rng, depth - 1);
      return o;
    }
  }
}

/** Every location in a JSON document: its parent container and key (or index). */
function locations(doc: Json): { parent: Json[] | Record<string, Json>; key: string | number }[] {
  const out: { parent: Json[] | Record<string, Json>; key: string | number }[] = [];
  const visit = (node: Json) => {
    if (Array.isArray(node)) {
      node.forEach((child, i) => {
        out.push({ parent: node, key: i });
        visit(child);
      });
    } else if (node !== null && typeof node === 'object') {
      for (const [k, child] of Object.entries(node)) {
        out.push({ parent: node, key: k });
        visit(child);
      }
    }
  };
  visit(doc);
  return out;
}

const typeOf = (v: Json): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/**
 * One structural mutation of a JSON document: a value replaced by one of another type, a key removed, an
 * unknown key added, an array item duplicated, or a key renamed to its snake_case or a wrong spelling.
 * The result may stay a valid request (protojson ignores unknown fields and treats null as absent).
 */
export function mutateJson(rng: Rng, text: string): string {
  const doc = JSON.parse(text) as Json;
  const spots = locations(doc);
  if (spots.length === 0) return JSON.stringify(randomJson(rng));
  const { parent, key } = rng.pick(spots);
  const current = (parent as Record<string | number, Json>)[key] as Json;
  const op = rng.int(5);
  if (op <= 1) {
    let replacement = randomJson(rng);
    for (let i = 0; i < 8 && typeOf(replacement) === typeOf(current); i++) replacement = randomJson(rng);
    (parent as Record<string | number, Json>)[key] = replacement;
  } else if (op === 2) {
    if (Array.isArray(parent)) parent.splice(key as number, 1);
    else delete parent[key as string];
  } else if (op === 3) {
    if (Array.isArray(parent)) parent.splice(key as number, 0, current);
    else parent[`${String(key)}${rng.pick(['_', 'X', ''])}${rng.int(3)}`] = randomJson(rng);
  } else if (!Array.isArray(parent)) {
    const k = key as string;
    const renamed = rng.chance(0.5) ? k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`) : k.toUpperCase();
    delete parent[k];
    parent[renamed] = current;
  } else {
    (parent as Json[])[key as number] = randomJson(rng);
  }
  return JSON.stringify(doc);
}

/**
 * Mutations of the rich request's JSON (see {@link richRequest}) that give a field a value the OTLP JSON
 * mapping does not allow there. Each is certainly invalid: a receiver must answer 400. `null` is left out
 * (protojson reads it as an absent field), as are lenient spellings protojson accepts (decimal strings for
 * integers, enum names, numbers for 64-bit fields).
 */
export function wrongTypeMutations(): { what: string; apply: (doc: Record<string, unknown>) => void }[] {
  type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const rs = (d: Doc) => d.resourceSpans[0];
  const ss = (d: Doc) => rs(d).scopeSpans[0];
  const span = (d: Doc) => ss(d).spans[0];
  const attr = (d: Doc, key: string) => (span(d).attributes as Doc[]).find((kv) => kv.key === key) as Doc;
  const notString: unknown[] = [5, true, {}, [], ['x']];
  const notObject: unknown[] = ['x', 5, true, ['x']];
  const notList: unknown[] = ['x', 5, true, {}];
  const notHex: unknown[] = [5, true, {}, [], 'xyz1', 'abc', 'AAECAwQFBgc=', '0x0102'];
  const notUint64: unknown[] = [{}, [], true, '-1', '1.5', 'abc', '', ' 1', -1, 1.5, '18446744073709551616', 1e300];
  const notInt64: unknown[] = [{}, [], true, '1.5', 'abc', '', 1.5, '9223372036854775808', '-9223372036854775809', 'NaN'];
  const notEnum: unknown[] = [{}, [], true, 1.5, 'SPAN_KIND_NOPE', '', 2 ** 40];
  const cases: [string, (d: Doc, v: unknown) => void, unknown[]][] = [
    ['resourceSpans', (d, v) => (d.resourceSpans = v), notList],
    ['resourceSpans[0]', (d, v) => (d.resourceSpans[0] = v), notObject],
    ['resource', (d, v) => (rs(d).resource = v), notObject],
    ['resource.attributes', (d, v) => (rs(d).resource.attributes = v), notList],
    ['resource.attributes[0]', (d, v) => (rs(d).resource.attributes[0] = v), notObject],
    ['scopeSpans', (d, v) => (rs(d).scopeSpans = v), notList],
    ['scopeSpans[0]', (d, v) => (rs(d).scopeSpans[0] = v), notObject],
    ['scope', (d, v) => (ss(d).scope = v), notObject],
    ['scope.name', (d, v) => (ss(d).scope.name = v), notString],
    ['scope.version', (d, v) => (ss(d).scope.version = v), notString],
    ['spans', (d, v) => (ss(d).spans = v), notList],
    ['spans[0]', (d, v) => (ss(d).spans[0] = v), notObject],
    ['traceId', (d, v) => (span(d).traceId = v), notHex],
    ['spanId', (d, v) => (span(d).spanId = v), notHex],
    ['parentSpanId', (d, v) => (span(d).parentSpanId = v), notHex],
    ['name', (d, v) => (span(d).name = v), notString],
    ['kind', (d, v) => (span(d).kind = v), notEnum],
    ['startTimeUnixNano', (d, v) => (span(d).startTimeUnixNano = v), notUint64],
    ['endTimeUnixNano', (d, v) => (span(d).endTimeUnixNano = v), notUint64],
    ['attributes', (d, v) => (span(d).attributes = v), notList],
    ['attributes[0]', (d, v) => (span(d).attributes[0] = v), notObject],
    ['attributes[0].key', (d, v) => (span(d).attributes[0].key = v), notString],
    ['attributes[0].value', (d, v) => (span(d).attributes[0].value = v), notObject],
    ['stringValue', (d, v) => (attr(d, 'x.string').value = { stringValue: v }), notString],
    ['intValue', (d, v) => (attr(d, 'x.int').value = { intValue: v }), notInt64],
    ['boolValue', (d, v) => (attr(d, 'x.bool').value = { boolValue: v }), ['true', 1, 0, {}, []]],
    ['doubleValue', (d, v) => (attr(d, 'x.double').value = { doubleValue: v }), [{}, [], true, 'abc', '', ' 1', 'nan']],
    ['bytesValue', (d, v) => (attr(d, 'x.bytes').value = { bytesValue: v }), [5, true, {}, [], '!!!!', 'a b']],
    ['arrayValue', (d, v) => (attr(d, 'x.array').value = { arrayValue: v }), notObject],
    ['arrayValue.values', (d, v) => (attr(d, 'x.array').value = { arrayValue: { values: v } }), notList],
    ['arrayValue.values[0]', (d, v) => (attr(d, 'x.array').value.arrayValue.values[0] = v), notObject],
    ['kvlistValue', (d, v) => (attr(d, 'x.kvlist').value = { kvlistValue: v }), notObject],
    ['kvlistValue.values', (d, v) => (attr(d, 'x.kvlist').value = { kvlistValue: { values: v } }), notList],
    ['kvlistValue.values[0]', (d, v) => (attr(d, 'x.kvlist').value.kvlistValue.values[0] = v), notObject],
    [
      'AnyValue with two values',
      (d, v) => (attr(d, 'x.string').value = { stringValue: 'a', ...(v as object) }),
      [{ intValue: '1' }, { boolValue: true }, { arrayValue: { values: [] } }],
    ],
    ['status', (d, v) => (span(d).status = v), notObject],
    ['status.code', (d, v) => (span(d).status.code = v), notEnum],
    ['status.message', (d, v) => (span(d).status.message = v), notString],
  ];
  const out: { what: string; apply: (doc: Record<string, unknown>) => void }[] = [];
  for (const [what, set, values] of cases) {
    for (const v of values) out.push({ what: `${what} = ${JSON.stringify(v)}`, apply: (doc) => set(doc as Doc, structuredClone(v)) });
  }
  return out;
}

/** Top-level documents that are JSON but not an ExportTraceServiceRequest object. */
export const NOT_A_REQUEST_OBJECT: readonly string[] = ['[]', '[{}]', '5', '"resourceSpans"', 'true', 'null', '"{}"'];

// ---------------------------------------------------------------------------------------------------------
// Answers

/**
 * The message of a google.rpc.Status error body (`{code, message}` as JSON, or field 2 of the protobuf),
 * or undefined when the body is neither.
 */
export function statusMessage(body: Buffer, contentType: string | null): string | undefined {
  if ((contentType ?? '').includes('json')) {
    try {
      const parsed = JSON.parse(body.toString('utf8')) as { message?: unknown };
      return typeof parsed.message === 'string' ? parsed.message : undefined;
    } catch {
      return undefined;
    }
  }
  let pos = 0;
  while (pos < body.length) {
    const tag = readVarint(body, pos, body.length);
    if (!tag) return undefined;
    pos = tag[1];
    const wire = tag[0] & 7;
    if (wire === 0) {
      const v = readVarint(body, pos, body.length);
      if (!v) return undefined;
      pos = v[1];
    } else if (wire === 2) {
      const len = readVarint(body, pos, body.length);
      if (!len || len[1] + len[0] > body.length) return undefined;
      if (tag[0] >>> 3 === 2) return body.subarray(len[1], len[1] + len[0]).toString('utf8');
      pos = len[1] + len[0];
    } else {
      return undefined;
    }
  }
  return undefined;
}
