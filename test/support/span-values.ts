/**
 * fast-check arbitraries of PD spans whose every attribute and timestamp ranges over its type's whole domain and the
 * edges of the ClickHouse column it is stored in, and the model that says, for each generated span, what holdscope
 * must do with it: store it exactly (`ok`), reject it with a reason naming the field (`bad`), or either of the two
 * (`either`: a value on an edge whose side depends on the receiver's clock, or that the contract leaves open).
 *
 * The model is written from the contract's text (docs/span-contract.md) and the `spans` table's column types
 * (pipeline/migrations/0001_spans_and_lifecycles.sql), never from the validator under test: its ranges are spelled
 * out here, not imported from contract/limits.ts.
 */
import fc from 'fast-check';
import {
  AdmissionOutcome,
  Attr,
  ChecksumOutcome,
  EMITTED_BY,
  ReleaseReason,
  ResourceAttr,
  SPAN_NAMES,
  TimeoutAction,
  TransferStatus,
  type AttrMap,
  type AttrValue,
  type OtlpResourceSpans,
  type OtlpSpan,
  type SpanName,
} from '../../contract/index.ts';
import { encodeOtlpJson, encodeOtlpProtobuf } from '../../contract/index.ts';

// ---------------------------------------------------------------------------------------------------------
// What can be stored (the columns of `spans`) and what the receiver takes (docs/span-contract.md, docs/collector.md)

const INT32_MAX = 2 ** 31 - 1; // rank, chunk_index: Int32, the contract's ints are non-negative
const UINT32_MAX = 2 ** 32 - 1; // generation, slots, pages items, ...: UInt32
const SAFE_MAX = Number.MAX_SAFE_INTEGER; // transfer_bytes: UInt64, but the contract's ints stop at 2^53-1
const MAX_STRING = 1024; // "string: non-empty and at most 1024 characters"
/** The collector's --max-attribute-length default: characters of a string, items of an array (nested counted). */
const MAX_ATTRIBUTE_LENGTH = 4096;
/** The collector's --max-attributes default. */
const MAX_ATTRIBUTES = 128;
const NS_PER_MS = 1_000_000n;
/** The collector's defaults: --max-clock-skew-ms 1 h, --retention-days 30. */
const SKEW_NS = 3_600_000n * NS_PER_MS;
export const RETENTION_NS = 30n * 86_400_000n * NS_PER_MS;
/**
 * How much later than the sender's clock reading the collector may read its own (the request's flight and a busy
 * machine): a time this close to an edge of the window may land on either side of it.
 */
const EDGE_NS = 60_000n * NS_PER_MS;
/** ClickHouse's DateTime (UInt32 seconds) ends 2106-02-07T06:28:15Z: the last nanosecond of that second. */
const DATETIME_END_NS = 4_294_967_295_999_999_999n;
/** DateTime64(9)'s end, 2262-04-11T23:47:16.854775807Z: Int64 nanoseconds. */
const DATETIME64_END_NS = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;
/** 1900-01-01T00:00:00Z, DateTime64's start, as a sender doing int64 arithmetic would write it into a fixed64. */
const YEAR_1900_WRAPPED = 2n ** 64n - 2_208_988_800n * 1_000_000_000n;

// ---------------------------------------------------------------------------------------------------------
// Values and their class

/** `ok`: must be stored exactly; `bad`: the span must be rejected; `either`: rejected, or stored exactly. */
type Cls = 'ok' | 'either' | 'bad';
/** One generated attribute: its value (undefined: the attribute is not sent) and its class when sent where it belongs. */
interface Val {
  v: AttrValue | undefined;
  c: Cls;
}

/**
 * A double with an integral value (`{"doubleValue": 5}`): the contract's encoders write integral numbers as OTLP
 * ints, so it travels as this marker string and the request's JSON is rewritten (protobuf sends the plain number).
 */
const DOUBLE_MARKER = '\u0000\u0001holdscope-double:';
const doubleMarker = (n: number): string => `${DOUBLE_MARKER}${n}`;
const markedDouble = (v: AttrValue | undefined): number | undefined =>
  typeof v === 'string' && v.startsWith(DOUBLE_MARKER) ? Number(v.slice(DOUBLE_MARKER.length)) : undefined;

const ok = <T extends AttrValue>(a: fc.Arbitrary<T>) => a.map((v): Val => ({ v, c: 'ok' }));

/**
 * A value of one attribute: values it must store (`ok`), on an edge (`either`), and, when `withBad`, values it must
 * reject. Weighted so that a span of a dozen attributes is often entirely valid: a span with bad values may have
 * several, and the spans drawn without bad values (half of them) exercise the valid domain's edges.
 */
function choose(
  withBad: boolean,
  good: fc.Arbitrary<Val>,
  edge: fc.Arbitrary<Val> | undefined,
  bads: fc.Arbitrary<Val>[],
): fc.Arbitrary<Val> {
  const arbs: fc.WeightedArbitrary<Val>[] = [{ arbitrary: good, weight: 60 }];
  if (edge) arbs.push({ arbitrary: edge, weight: 1 });
  if (withBad) for (const b of bads) arbs.push({ arbitrary: b, weight: 2 });
  // Cross-shrinking: a failing value also tries the valid ones, so a counterexample keeps only the values at fault.
  return fc.oneof({ withCrossShrink: true }, ...arbs);
}
const bad = <T extends AttrValue>(a: fc.Arbitrary<T>) => a.map((v): Val => ({ v, c: 'bad' }));
const either = <T extends AttrValue>(a: fc.Arbitrary<T>) => a.map((v): Val => ({ v, c: 'either' }));
const ABSENT: fc.Arbitrary<Val> = fc.constant({ v: undefined, c: 'bad' });

/** Values of another type than the attribute's, for wrong-type cases (`exclude` leaves out the attribute's own). */
function wrongTypes(exclude: 'int' | 'string' | 'bool' | 'array'): fc.Arbitrary<AttrValue> {
  const all: [string, fc.Arbitrary<AttrValue>][] = [
    ['int', fc.constantFrom<AttrValue>(0, 1, 5, -1)],
    ['string', fc.constantFrom<AttrValue>('0', '1', '5', 'true', 'NaN', '[1,2]', 'ok')],
    ['bool', fc.boolean()],
    ['array', fc.constantFrom<AttrValue>([], [1], ['a'], [true])],
    ['null', fc.constant(null)],
    ['bytes', fc.uint8Array({ maxLength: 8 })],
    ['kvlist', fc.constant<AttrValue>({ a: 1 })],
    ['double', fc.constantFrom<AttrValue>(0.5, NaN, Infinity)],
  ];
  return fc.oneof(...all.filter(([k]) => k !== exclude).map(([, a]) => a));
}

/** Edges of the integer columns and of the contract's int. */
const INT_EDGES = [0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1];

/** An item of an integer column that holds 0..max: ok inside, bad outside (too large, negative, fractional, NaN-ish). */
function intItem(max: number): { ok: fc.Arbitrary<number>; bad: fc.Arbitrary<AttrValue> } {
  const inside = [...new Set([...INT_EDGES.filter((x) => x <= max), max, max - 1])];
  const above = [...new Set([...INT_EDGES.filter((x) => x > max), max + 1, 2 ** 53, 2 ** 63, 2 ** 64, 1e300])];
  const tooLarge: fc.Arbitrary<AttrValue>[] = [fc.constantFrom(...above), fc.bigInt(BigInt(max) + 1n, 2n ** 63n - 1n)];
  if (max < SAFE_MAX) tooLarge.push(fc.integer({ min: max + 1, max: SAFE_MAX }));
  return {
    ok: fc.oneof(fc.constantFrom(...inside), fc.integer({ min: 0, max }), fc.constant(-0)),
    bad: fc.oneof(
      ...tooLarge,
      fc.constantFrom(-1, -(2 ** 31), -(2 ** 32), -(2 ** 53 - 1)),
      fc.integer({ min: -SAFE_MAX, max: -1 }),
      fc.bigInt(-(2n ** 63n), -1n),
      fc.constantFrom(0.5, 1.5, -0.5, Number.MIN_VALUE, 2 ** 31 + 0.5, NaN, Infinity, -Infinity),
      fc.double({ noInteger: true }),
    ),
  };
}

/** An int attribute stored in a column holding 0..max. */
function intVal(max: number, withBad: boolean): fc.Arbitrary<Val> {
  const item = intItem(max);
  // A double that happens to be integral: the contract asks for an OTLP int; decoded it is the same number.
  return choose(withBad, ok(item.ok), either(fc.integer({ min: 0, max }).map(doubleMarker)), [
    bad(item.bad),
    bad(item.bad),
    bad(wrongTypes('int')),
    ABSENT,
  ]);
}

/** `s` cut or padded with `a` to exactly `units` UTF-16 code units, never splitting a surrogate pair. */
function toUnits(s: string, units: number): string {
  let out = '';
  for (const ch of s) {
    if (out.length + ch.length > units) break;
    out += ch;
  }
  return out + 'a'.repeat(units - out.length);
}

const SPECIAL_STRINGS = [
  '\t',
  '\n',
  '\r\n',
  '\\',
  '\\t',
  "'",
  '"',
  '\u0000',
  '\u0007',
  '\u007f',
  '\u2028',
  '\u202e',
  ' ',
  'é',
  '\u{1f600}',
  '\ufffd',
  '\ufeff',
  "a'b\\c\td\ne",
  'NULL',
  '\\N',
];

/** A non-empty string of at most `max` UTF-16 code units. */
function okString(max = MAX_STRING): fc.Arbitrary<string> {
  return fc.oneof(
    { withCrossShrink: true },
    fc.string({ unit: 'binary', minLength: 1, maxLength: 24 }),
    fc.string({ unit: 'binary-ascii', minLength: 1, maxLength: 24 }),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }),
    fc.constantFrom(...SPECIAL_STRINGS),
    fc.string({ unit: 'binary', maxLength: 24 }).map((s) => toUnits(s, max)),
    fc.constantFrom('x'.repeat(max), '\u{1f600}'.repeat(max / 2)),
  );
}

/** Strings the contract refuses: empty, one unit too long, far too long, or not Unicode (a lone surrogate). */
function badString(): fc.Arbitrary<string> {
  return fc.oneof(
    fc.constant(''),
    fc.string({ unit: 'binary', maxLength: 24 }).map((s) => toUnits(s, MAX_STRING + 1)),
    fc.constantFrom('x'.repeat(MAX_STRING + 1), 'y'.repeat(MAX_ATTRIBUTE_LENGTH + 1)),
    // Not a string of Unicode characters: it cannot be written as UTF-8, so it cannot be stored as sent.
    // And at 1024 units, so that each of its UTF-8 replacements (three U+FFFD) would make it longer than allowed.
    fc.constantFrom('\ud800', 'a\udc00b', `${'x'.repeat(100)}\udbff`, `${'x'.repeat(MAX_STRING - 1)}\ud800`),
  );
}

/** A string attribute (missing is bad where it is required: the model decides). */
function stringVal(withBad: boolean): fc.Arbitrary<Val> {
  // At most 1024 characters (code points) but more than 1024 UTF-16 code units: which one "characters" means is open.
  return choose(withBad, ok(okString()), either(fc.constantFrom('\u{1f600}'.repeat(600), '\u{1f600}'.repeat(MAX_STRING))), [
    bad(badString()),
    bad(badString()),
    bad(wrongTypes('string')),
    ABSENT,
  ]);
}

function enumVal(values: readonly string[], withBad: boolean): fc.Arbitrary<Val> {
  const near = values.flatMap((v) => [v.toUpperCase(), ` ${v}`, `${v}\u0000`, `${v}\n`, v.slice(0, -1)]);
  return choose(withBad, ok(fc.constantFrom(...values)), undefined, [
    bad(fc.constantFrom('', 'unknown', ...near)),
    bad(wrongTypes('string')),
    ABSENT,
  ]);
}

function boolVal(withBad: boolean): fc.Arbitrary<Val> {
  return choose(withBad, ok(fc.boolean()), undefined, [bad(fc.constantFrom<AttrValue>('true', 'false', 0, 1, null, [true])), ABSENT]);
}

/** `n` items of 0..max spread over the column, from a seed (so shrinking does not walk 4096 items). */
const spread = (n: number, max: number) =>
  fc.integer({ min: 0, max }).map((seed) => Array.from({ length: n }, (_, i) => (seed + i * 2_654_435_761) % (max + 1)));

/** An int array attribute (pages, ranks) whose items are stored in a column holding 0..max. */
function intArrayVal(max: number, withBad: boolean): fc.Arbitrary<Val> {
  const item = intItem(max);
  const withBadItem = fc.tuple(fc.array(item.ok, { maxLength: 8 }), fc.oneof(item.bad, wrongTypes('int')), fc.nat()).map(([xs, b, at]) => {
    const out: AttrValue[] = [...xs];
    out.splice(at % (xs.length + 1), 0, b);
    return out;
  });
  const good = fc.oneof(
    { withCrossShrink: true },
    { arbitrary: fc.array(item.ok, { maxLength: 16 }), weight: 10 },
    { arbitrary: fc.constantFrom<number[]>([], [0], [max], [0, max, 0]), weight: 3 },
    { arbitrary: spread(MAX_ATTRIBUTE_LENGTH, max), weight: 1 },
  );
  return choose(withBad, ok(good), undefined, [
    bad(withBadItem),
    bad(withBadItem),
    bad(spread(MAX_ATTRIBUTE_LENGTH + 1, max)),
    bad(wrongTypes('array')),
    ABSENT,
  ]);
}

function stringArrayVal(withBad: boolean): fc.Arbitrary<Val> {
  const withBadItem = fc
    .tuple(fc.array(okString(), { maxLength: 4 }), fc.oneof(badString(), wrongTypes('string')), fc.nat())
    .map(([xs, b, at]) => {
      const out: AttrValue[] = [...xs];
      out.splice(at % (xs.length + 1), 0, b);
      return out;
    });
  const good = fc.oneof(
    { withCrossShrink: true },
    { arbitrary: fc.array(okString(), { maxLength: 6 }), weight: 10 },
    { arbitrary: fc.constant<string[]>([]), weight: 2 },
    { arbitrary: fc.constant(Array.from({ length: MAX_ATTRIBUTE_LENGTH }, (_, i) => `e${i}`)), weight: 1 },
  );
  const tooMany = fc.constant(Array.from({ length: MAX_ATTRIBUTE_LENGTH + 1 }, (_, i) => `e${i}`));
  return choose(withBad, ok(good), undefined, [bad(withBadItem), bad(withBadItem), bad(tooMany), bad(wrongTypes('array')), ABSENT]);
}

// ---------------------------------------------------------------------------------------------------------
// The spans' own attributes and where each is stored

type Kind = 'int' | 'intArray' | 'string' | 'stringArray' | 'bool' | 'enum';
interface AttrSpec {
  key: string;
  column: string;
  kind: Kind;
  max?: number;
  values?: readonly string[];
  optional?: boolean;
}

const spec = (key: string, column: string, kind: Kind, more: Partial<AttrSpec> = {}): AttrSpec => ({ key, column, kind, ...more });
const PAGES = spec(Attr.kvPages, 'pages', 'intArray', { max: UINT32_MAX });
const SLOTS = spec(Attr.kvSlots, 'slots', 'int', { max: UINT32_MAX });
const RANK = spec(Attr.rank, 'rank', 'int', { max: INT32_MAX });
const DECODE_ENGINE = spec(Attr.decodeEngineId, 'decode_engine_id', 'string');

/** Each span's own attributes, in the contract's order, with their columns (migration 0001). */
const OWN_ATTRS: Readonly<Record<SpanName, readonly AttrSpec[]>> = {
  'pd.admission': [
    spec(Attr.admissionOutcome, 'admission_outcome', 'enum', { values: Object.values(AdmissionOutcome) }),
    spec(Attr.admissionReason, 'admission_reason', 'string', { optional: true }),
  ],
  'pd.kv.alloc': [PAGES, SLOTS],
  'pd.transfer': [
    RANK,
    spec(Attr.chunkIndex, 'chunk_index', 'int', { max: INT32_MAX }),
    PAGES,
    spec(Attr.transferStatus, 'transfer_status', 'enum', { values: Object.values(TransferStatus) }),
    spec(Attr.transferBytes, 'transfer_bytes', 'int', { max: SAFE_MAX }),
    DECODE_ENGINE,
  ],
  'pd.handoff': [],
  'pd.hold': [
    spec(Attr.holdExpectedRanks, 'expected_ranks', 'intArray', { max: UINT32_MAX }),
    spec(Attr.holdTimeoutMs, 'hold_timeout_ms', 'int', { max: UINT32_MAX }),
    SLOTS,
    PAGES,
  ],
  'pd.drain': [
    RANK,
    spec(Attr.drainChunksDropped, 'chunks_dropped', 'int', { max: UINT32_MAX }),
    spec(Attr.drainInflight, 'inflight', 'int', { max: UINT32_MAX }),
    spec(Attr.drainFailedSends, 'failed_sends', 'int', { max: UINT32_MAX }),
    spec(Attr.drainAckWithheld, 'ack_withheld', 'bool'),
    DECODE_ENGINE,
  ],
  'pd.ack': [RANK, spec(Attr.ackGeneration, 'ack_generation', 'int', { max: UINT32_MAX }), spec(Attr.ackAccepted, 'ack_accepted', 'bool')],
  'pd.timeout': [
    spec(Attr.timeoutMissingRanks, 'missing_ranks', 'intArray', { max: UINT32_MAX }),
    spec(Attr.timeoutAction, 'timeout_action', 'enum', { values: Object.values(TimeoutAction) }),
  ],
  'pd.release': [spec(Attr.releaseReason, 'release_reason', 'enum', { values: Object.values(ReleaseReason) }), PAGES],
  'pd.checksum': [spec(Attr.checksumOutcome, 'checksum_outcome', 'enum', { values: Object.values(ChecksumOutcome) })],
  'pd.cancel': [spec(Attr.cancelTargets, 'cancel_targets', 'stringArray')],
};

/** Every span attribute of the contract but the common ones, once. */
const ALL_OWN: readonly AttrSpec[] = [
  ...new Map(
    Object.values(OWN_ATTRS)
      .flat()
      .map((s) => [s.key, s]),
  ).values(),
];

function valOf(s: AttrSpec, withBad: boolean): fc.Arbitrary<Val> {
  switch (s.kind) {
    case 'int':
      return intVal(s.max as number, withBad);
    case 'intArray':
      return intArrayVal(s.max as number, withBad);
    case 'string':
      return stringVal(withBad);
    case 'stringArray':
      return stringArrayVal(withBad);
    case 'bool':
      return boolVal(withBad);
    case 'enum':
      return enumVal(s.values as readonly string[], withBad);
  }
}

/** Columns a span fills only when it has the attribute; the table's defaults otherwise. */
export const COLUMN_DEFAULTS: Readonly<Record<string, unknown>> = {
  rank: -1,
  chunk_index: -1,
  pages: [],
  slots: 0,
  admission_outcome: '',
  admission_reason: '',
  transfer_status: '',
  transfer_bytes: '0',
  decode_engine_id: '',
  expected_ranks: [],
  hold_timeout_ms: 0,
  chunks_dropped: 0,
  inflight: 0,
  failed_sends: 0,
  ack_withheld: 0,
  ack_generation: 0,
  ack_accepted: 0,
  missing_ranks: [],
  timeout_action: '',
  release_reason: '',
  checksum_outcome: '',
  cancel_targets: [],
};

// ---------------------------------------------------------------------------------------------------------
// Times

/** A start time: absolute, or relative to the sender's clock when the span is sent. */
type StartSpec = { abs: bigint } | { fromNow: bigint };
/** An end time: the start's (an instant), after it, before it, absolute, or relative to the sender's clock. */
type EndSpec = { same: true } | { plus: bigint } | { minus: bigint } | { abs: bigint } | { fromNow: bigint };

const inWindow = fc.bigInt(-(RETENTION_NS - 2n * EDGE_NS), SKEW_NS - 2n * EDGE_NS);
/** Starts the receiver takes, from its window's edges (now, the skew, the retention) to anywhere inside. */
const startOk: fc.Arbitrary<StartSpec> = fc.oneof(
  { arbitrary: inWindow.map((fromNow) => ({ fromNow })), weight: 12 },
  {
    arbitrary: fc.constantFrom(0n, -1n, 1n, SKEW_NS - 2n * EDGE_NS, SKEW_NS, -RETENTION_NS + 2n * EDGE_NS).map((fromNow) => ({ fromNow })),
    weight: 3,
  },
);
/** Starts on an edge of the window (either side), and starts outside it or outside what can be stored. */
const startEdge: fc.Arbitrary<StartSpec> = fc.constantFrom(SKEW_NS + 1n, -RETENTION_NS + 1n).map((fromNow) => ({ fromNow }));
const startBad: fc.Arbitrary<StartSpec> = fc.oneof(
  fc
    .constantFrom(SKEW_NS + 2n * EDGE_NS, -RETENTION_NS - 1n, -RETENTION_NS - 2n * EDGE_NS, -400n * 86_400_000n * NS_PER_MS)
    .map((fromNow) => ({ fromNow })),
  fc
    .constantFrom(
      0n,
      1n,
      1_000_000_000n,
      DATETIME_END_NS,
      DATETIME_END_NS + 1n,
      DATETIME64_END_NS,
      DATETIME64_END_NS + 1n,
      UINT64_MAX,
      YEAR_1900_WRAPPED,
      YEAR_1900_WRAPPED - 1n,
    )
    .map((abs) => ({ abs })),
  fc.bigInt(0n, UINT64_MAX).map((abs) => ({ abs })),
);
function startSpec(withBad: boolean): fc.Arbitrary<StartSpec> {
  const arbs: fc.WeightedArbitrary<StartSpec>[] = [
    { arbitrary: startOk, weight: 30 },
    { arbitrary: startEdge, weight: 1 },
  ];
  if (withBad) arbs.push({ arbitrary: startBad, weight: 6 });
  return fc.oneof(...arbs);
}
/** Instants, intervals of up to an hour, and (with bad values) ends before the start or anywhere in uint64. */
function endSpec(withBad: boolean): fc.Arbitrary<EndSpec> {
  const arbs: fc.WeightedArbitrary<EndSpec>[] = [
    { arbitrary: fc.constant({ same: true as const }), weight: 20 },
    { arbitrary: fc.oneof(fc.constantFrom(1n, 999_999_999n), fc.bigInt(0n, 3_600_000n * NS_PER_MS)).map((plus) => ({ plus })), weight: 8 },
    { arbitrary: fc.constantFrom(SKEW_NS, 0n).map((fromNow) => ({ fromNow })), weight: 1 },
  ];
  if (withBad) {
    arbs.push(
      { arbitrary: fc.oneof(fc.constant(1n), fc.bigInt(1n, UINT64_MAX)).map((minus) => ({ minus })), weight: 2 },
      { arbitrary: fc.constantFrom(SKEW_NS + 2n * EDGE_NS, UINT64_MAX).map((fromNow) => ({ fromNow })), weight: 1 },
      {
        arbitrary: fc.oneof(fc.constantFrom(0n, DATETIME_END_NS + 1n, UINT64_MAX), fc.bigInt(0n, UINT64_MAX)).map((abs) => ({ abs })),
        weight: 1,
      },
    );
  }
  return fc.oneof(...arbs);
}

const clamp64 = (n: bigint) => (n < 0n ? 0n : n > UINT64_MAX ? UINT64_MAX : n);

export function resolveTimes(c: SpanCase, nowNs: bigint): { start: bigint; end: bigint } {
  const start = clamp64('abs' in c.start ? c.start.abs : nowNs + c.start.fromNow);
  const e = c.end;
  const end = clamp64(
    'same' in e ? start : 'plus' in e ? start + e.plus : 'minus' in e ? start - e.minus : 'abs' in e ? e.abs : nowNs + e.fromNow,
  );
  return { start, end };
}

// ---------------------------------------------------------------------------------------------------------
// Spans

export interface SpanCase {
  encoding: 'protobuf' | 'json';
  /**
   * JSON only: write the span's 64-bit integers (start and end times, int values) as JSON numbers rather than decimal
   * strings, which the protobuf JSON mapping accepts too (an exact decimal in the text either way).
   */
  jsonNumbers: boolean;
  name: string;
  /** The resource's attributes (pd.role, pd.engine.id, ...), by key. */
  resource: Record<string, Val>;
  /** pd.contract.version on the span, pd.request.id, pd.request.generation, and every contract attribute by key. */
  attrs: Record<string, Val>;
  /** Contract attributes of other spans also sent on this one (they are ignored). */
  foreign: string[];
  /** Attributes outside the contract (ignored, but bounded by the collector's limits). */
  extras: AttrMap;
  start: StartSpec;
  end: EndSpec;
}

/** A role that may emit the span (an unknown name: any), or one that may not, or no role at all. */
function roleVal(name: string, withBad: boolean): fc.Arbitrary<Val> {
  const allowed: readonly string[] = (SPAN_NAMES as readonly string[]).includes(name)
    ? EMITTED_BY[name as SpanName]
    : ['router', 'prefill', 'decode'];
  const others = ['router', 'prefill', 'decode'].filter((r) => !allowed.includes(r));
  // The model judges the role against the name: a role that may not emit the span is `ok` as a role, and still bad.
  const wrongRole = others.length > 0 ? [ok(fc.constantFrom(...others))] : [];
  return choose(withBad, ok(fc.constantFrom(...allowed)), undefined, [
    ...wrongRole,
    ...wrongRole,
    bad(fc.constantFrom('Decode', 'decoder', '', 'prefill ', 'PREFILL')),
    bad(wrongTypes('string')),
    ABSENT,
  ]);
}
/** pd.contract.version, on the span or the resource: mostly absent (version 1), else 1. */
const contractVersionVal = (withBad: boolean): fc.Arbitrary<Val> =>
  choose(
    withBad,
    fc.oneof({ arbitrary: fc.constant<Val>({ v: undefined, c: 'ok' }), weight: 3 }, { arbitrary: ok(fc.constant(1)), weight: 1 }),
    either(fc.constant(doubleMarker(1))),
    [bad(fc.constantFrom<AttrValue>(0, 2, -1, 2 ** 53, 1.5, '1', true, 2n ** 63n - 1n))],
  );
/** Optional where the model says so; a sent value is judged as a string. */
const clusterVal = (withBad: boolean): fc.Arbitrary<Val> =>
  fc.oneof({ arbitrary: fc.constant<Val>({ v: undefined, c: 'ok' }), weight: 1 }, { arbitrary: stringVal(withBad), weight: 1 });
/** Not read by the validator, but bounded by the collector's --max-attribute-length. */
const serviceNameVal = (withBad: boolean): fc.Arbitrary<Val> =>
  choose(
    withBad,
    fc.oneof(
      { withCrossShrink: true },
      { arbitrary: ok(okString()), weight: 10 },
      { arbitrary: ok(fc.constant('s'.repeat(MAX_ATTRIBUTE_LENGTH))), weight: 1 },
    ),
    undefined,
    [bad(fc.constant('s'.repeat(MAX_ATTRIBUTE_LENGTH + 1)))],
  );

/** An unknown `pd.` name is rejected; the eleven names are the contract's. */
const nameArb = (withBad: boolean): fc.Arbitrary<string> =>
  withBad
    ? fc.oneof(
        { arbitrary: fc.constantFrom(...SPAN_NAMES), weight: 30 },
        { arbitrary: fc.constantFrom('pd.kv.free', 'pd.', 'pd.HOLD', 'pd.hold ', 'pd.hold\u0000', `pd.${'n'.repeat(300)}`), weight: 1 },
      )
    : fc.constantFrom(...SPAN_NAMES);

/** Attributes outside the contract, ignored (bad only past the collector's limits: length, count). */
function extrasArb(withBad: boolean): fc.Arbitrary<AttrMap> {
  const values: fc.Arbitrary<AttrValue>[] = [
    fc.string({ unit: 'binary', maxLength: 16 }),
    fc.double(),
    fc.bigInt(-(2n ** 63n), 2n ** 63n - 1n),
    fc.boolean(),
    fc.constant(null),
    fc.uint8Array({ maxLength: 16 }),
    fc.array(fc.integer(), { maxLength: 4 }),
    fc.constant<AttrValue>({ k: [1, 'a', { z: true }] }),
    fc.constantFrom<AttrValue>('w'.repeat(MAX_ATTRIBUTE_LENGTH), new Uint8Array(MAX_ATTRIBUTE_LENGTH)),
  ];
  if (withBad) values.push(fc.constantFrom<AttrValue>('w'.repeat(MAX_ATTRIBUTE_LENGTH + 1), new Uint8Array(MAX_ATTRIBUTE_LENGTH + 1)));
  const arbs: fc.WeightedArbitrary<AttrMap>[] = [
    { arbitrary: fc.constant<AttrMap>({}), weight: 10 },
    {
      arbitrary: fc.dictionary(fc.constantFrom('x.note', 'service.instance.id', 'pd.unknown.attr', 'pd.request', ''), fc.oneof(...values), {
        maxKeys: 3,
      }),
      weight: 3,
    },
  ];
  // Past --max-attributes (128) with the contract's ones.
  if (withBad)
    arbs.push({
      arbitrary: fc.constant(Object.fromEntries(Array.from({ length: MAX_ATTRIBUTES + 2 }, (_, i) => [`x.a${i}`, i]))),
      weight: 1,
    });
  return fc.oneof(...arbs);
}

function spanCase(withBad: boolean): fc.Arbitrary<SpanCase> {
  return nameArb(withBad).chain((name) =>
    fc.record({
      encoding: fc.constantFrom('protobuf' as const, 'json' as const),
      jsonNumbers: fc.oneof({ arbitrary: fc.constant(false), weight: 3 }, { arbitrary: fc.constant(true), weight: 1 }),
      name: fc.constant(name),
      resource: fc.record({
        [ResourceAttr.role]: roleVal(name, withBad),
        [ResourceAttr.engineId]: stringVal(withBad),
        [ResourceAttr.engineVersion]: stringVal(withBad),
        [ResourceAttr.transferBackend]: stringVal(withBad),
        [ResourceAttr.kvCapacitySlots]: intVal(UINT32_MAX, withBad),
        [ResourceAttr.cluster]: clusterVal(withBad),
        [ResourceAttr.contractVersion]: contractVersionVal(withBad),
        [ResourceAttr.serviceName]: serviceNameVal(withBad),
      }),
      attrs: fc.record({
        [Attr.contractVersion]: contractVersionVal(withBad),
        [Attr.requestId]: stringVal(withBad),
        [Attr.generation]: intVal(UINT32_MAX, withBad),
        ...Object.fromEntries(ALL_OWN.map((s) => [s.key, valOf(s, withBad)])),
      }),
      foreign: fc.subarray(
        ALL_OWN.map((s) => s.key),
        { maxLength: 3 },
      ),
      extras: extrasArb(withBad),
      start: startSpec(withBad),
      end: endSpec(withBad),
    }),
  );
}

/**
 * A PD span: half drawn from values the contract takes (the whole valid domain and its edges: the valid role for its
 * name often, but not always, so wrong roles come in too), half with bad values among them.
 */
export const spanCaseArb: fc.Arbitrary<SpanCase> = fc.oneof(spanCase(false), spanCase(true));

// ---------------------------------------------------------------------------------------------------------
// The model: what must become of a span

/** Why a value breaks the collector's length limits (characters, bytes, items with nested ones), or undefined. */
function tooLong(v: AttrValue | undefined): boolean {
  let left = MAX_ATTRIBUTE_LENGTH;
  const visit = (x: AttrValue, top: boolean): boolean => {
    if (!top && --left < 0) return true;
    if (typeof x === 'string' || x instanceof Uint8Array) return x.length > MAX_ATTRIBUTE_LENGTH;
    if (x === null || typeof x !== 'object') return false;
    const items = Array.isArray(x) ? x : Object.values(x);
    if (!Array.isArray(x) && Object.keys(x).some((k) => k.length > MAX_ATTRIBUTE_LENGTH)) return true;
    return items.some((i) => visit(i, false));
  };
  return v !== undefined && visit(v, true);
}

/** What a stored value looks like when read back (JSONEachRow; UInt64 and times read as decimal text). */
function stored(s: AttrSpec, v: AttrValue): unknown {
  const d = markedDouble(v);
  if (d !== undefined) return s.column === 'transfer_bytes' ? String(d) : d;
  switch (s.kind) {
    case 'int':
      return s.column === 'transfer_bytes' ? String(v) : storedInt(v, 0);
    case 'intArray':
      return Array.isArray(v) ? v.map((x) => storedInt(x, 0)) : v;
    case 'bool':
      return v ? 1 : 0;
    default:
      return v;
  }
}

/** An int as read back (a value that cannot be stored is returned as it is: the span is rejected anyway). */
const storedInt = (v: AttrValue | undefined, absent: number): unknown =>
  v === undefined ? absent : (markedDouble(v) ?? (typeof v === 'number' ? v + 0 : v));

export interface Expectation {
  /** `stored`: must be stored exactly; `rejected`: must be rejected; `either`: one of the two. */
  outcome: 'stored' | 'rejected' | 'either';
  /** For a rejection: patterns of which the reason must match one (the fields at fault, or on an edge). */
  reasons: RegExp[];
  /** The row `spans` must hold, as read back (when the span may be stored). */
  row: Record<string, unknown>;
  /** What is wrong or on an edge, for failure messages. */
  notes: string[];
  /** Stored, it is past the retention by the time it is read: ClickHouse's TTL may have dropped it already. */
  mayExpire: boolean;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const keyRe = (key: string) => new RegExp(escapeRe(key));
const TIME_RE = /span\.start_time|span\.end_time|span ends before it starts|span has no start time/;

/** A string (or a list holding one) with a lone surrogate: not Unicode text, so it cannot be stored as sent. */
const notUnicode = (v: AttrValue | undefined): boolean =>
  typeof v === 'string'
    ? !(v as string & { isWellFormed(): boolean }).isWellFormed()
    : Array.isArray(v) && v.some((item) => notUnicode(item as AttrValue));

/**
 * The model's verdict on a span sent at `nowNs` (the sender's clock just before the request; the receiver's is read
 * later, by at most EDGE_NS), with its resolved times and ids.
 */
export function expectation(
  c: SpanCase,
  ids: { traceId: string; spanId: string },
  times: { start: bigint; end: bigint },
  nowNs: bigint,
): Expectation {
  const bads: { note: string; re: RegExp }[] = [];
  const edges: { note: string; re: RegExp }[] = [];
  const judge = (cls: Cls, note: string, re: RegExp) => {
    if (cls === 'bad') bads.push({ note, re });
    else if (cls === 'either') edges.push({ note, re });
  };
  const show = (v: AttrValue | undefined): string => {
    if (typeof v === 'string' && v.length > 40) return `string of ${v.length} units`;
    if (Array.isArray(v) && v.length > 8) return `array of ${v.length}`;
    if (v instanceof Uint8Array) return `${v.length} bytes`;
    return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x)) ?? String(v);
  };

  // Contract version: the span's wins over the resource's, which is read only when the span has none.
  const spanVersion = c.attrs[Attr.contractVersion] as Val;
  const resourceVersion = c.resource[ResourceAttr.contractVersion] as Val;
  const version = spanVersion.v !== undefined ? spanVersion : resourceVersion;
  judge(version.c, `pd.contract.version ${show(version.v)}`, keyRe(Attr.contractVersion));

  const name = c.name;
  const known = (SPAN_NAMES as readonly string[]).includes(name);
  if (!known) bads.push({ note: `name ${show(name)}`, re: /unknown PD span name/ });

  // Resource: the role decides what else is required.
  const role = c.resource[ResourceAttr.role] as Val;
  judge(role.c, `pd.role ${show(role.v)}`, keyRe(ResourceAttr.role));
  const roleName = role.c === 'ok' ? (role.v as string) : undefined;
  if (known && roleName && !(EMITTED_BY[name as SpanName] as readonly string[]).includes(roleName)) {
    bads.push({ note: `${name} from pd.role=${roleName}`, re: keyRe(ResourceAttr.role) });
  }
  const resourceAttr = (key: string, optional: boolean) => {
    const val = c.resource[key] as Val;
    if (val.v === undefined) {
      if (!optional) bads.push({ note: `${key} missing`, re: keyRe(key) });
      return;
    }
    judge(val.c, `${key} ${show(val.v)}`, keyRe(key));
    if (val.c !== 'bad' && notUnicode(val.v)) bads.push({ note: `${key} not Unicode`, re: keyRe(key) });
  };
  resourceAttr(ResourceAttr.engineId, false);
  resourceAttr(ResourceAttr.engineVersion, false);
  resourceAttr(ResourceAttr.transferBackend, roleName === 'router');
  resourceAttr(ResourceAttr.kvCapacitySlots, roleName !== 'decode');
  resourceAttr(ResourceAttr.cluster, true);
  const serviceName = c.resource[ResourceAttr.serviceName] as Val;
  judge(serviceName.c, `service.name of ${String((serviceName.v as string).length)} characters`, keyRe(ResourceAttr.serviceName));

  // Times.
  const { start, end } = times;
  const timeBad = (why: string) => bads.push({ note: why, re: TIME_RE });
  const timeEdge = (why: string) => edges.push({ note: why, re: TIME_RE });
  if (start === 0n) timeBad('start 0');
  // OTLP/JSON's 64-bit integers as JSON numbers: past 2^53 the parser rounds them, so the span cannot be stored as sent.
  const SAFE = BigInt(Number.MAX_SAFE_INTEGER);
  if (c.encoding === 'json' && c.jsonNumbers && (start > SAFE || end > SAFE)) timeBad('a time past 2^53 as a JSON number');
  if (end < start) timeBad(`end ${end} before start ${start}`);
  if (start > DATETIME_END_NS || end > DATETIME_END_NS) timeBad(`time past 2106: start ${start}, end ${end}`);
  const latest = start > end ? start : end;
  if (latest > nowNs + SKEW_NS + EDGE_NS) timeBad(`time more than the clock skew ahead: ${latest - nowNs} ns`);
  else if (latest > nowNs + SKEW_NS) timeEdge(`time at the clock skew's edge: ${latest - nowNs} ns ahead`);
  if (start < nowNs - RETENTION_NS) timeBad(`start before the retention: ${nowNs - start} ns ago`);
  else if (start < nowNs - RETENTION_NS + EDGE_NS) timeEdge(`start at the retention's edge: ${nowNs - start} ns ago`);

  // The span's attributes: the common ones, its own, and the ignored ones (bounded by the collector's limits).
  const attr = (key: string, optional = false) => {
    const val = c.attrs[key] as Val;
    if (val.v === undefined) {
      if (!optional) bads.push({ note: `${key} missing`, re: keyRe(key) });
      return;
    }
    judge(val.c, `${key} ${show(val.v)}`, keyRe(key));
    if (val.c !== 'bad' && tooLong(val.v)) bads.push({ note: `${key} too long`, re: keyRe(key) });
    if (val.c !== 'bad' && notUnicode(val.v)) bads.push({ note: `${key} not Unicode`, re: keyRe(key) });
  };
  attr(Attr.requestId);
  attr(Attr.generation);
  const own = known ? (OWN_ATTRS[name as SpanName] ?? []) : [];
  for (const s of own) attr(s.key, s.optional);
  const ownKeys = new Set(own.map((s) => s.key));
  const foreign = c.foreign.filter((k) => !ownKeys.has(k));
  for (const key of foreign) if (tooLong((c.attrs[key] as Val).v)) bads.push({ note: `ignored ${key} too long`, re: keyRe(key) });
  for (const [key, v] of Object.entries(c.extras)) if (tooLong(v)) bads.push({ note: `ignored ${key} too long`, re: keyRe(key) });
  const sentAttributes = Object.keys(buildSpan(c, ids, times).span.attributes).length;
  if (sentAttributes > MAX_ATTRIBUTES) bads.push({ note: `${sentAttributes} attributes`, re: /attributes, more than the limit/ });

  const value = (key: string) => (c.attrs[key] as Val).v;
  const rv = (key: string) => (c.resource[key] as Val).v;
  const row: Record<string, unknown> = {
    cluster: rv(ResourceAttr.cluster) ?? 'default',
    request_id: value(Attr.requestId),
    generation: storedInt(value(Attr.generation), 0),
    name,
    trace_id: ids.traceId,
    span_id: ids.spanId,
    start_ns: String(start),
    end_ns: String(end),
    engine_id: rv(ResourceAttr.engineId),
    engine_role: rv(ResourceAttr.role),
    engine_version: rv(ResourceAttr.engineVersion),
    backend: rv(ResourceAttr.transferBackend) ?? '',
    capacity_slots: storedInt(rv(ResourceAttr.kvCapacitySlots), 0),
    ...COLUMN_DEFAULTS,
  };
  for (const s of own) {
    const v = value(s.key);
    if (v !== undefined) row[s.column] = stored(s, v);
  }
  const outcome = bads.length > 0 ? 'rejected' : edges.length > 0 ? 'either' : 'stored';
  return {
    outcome,
    reasons: [...bads, ...edges].map((b) => b.re),
    row,
    notes: [...bads.map((b) => `bad: ${b.note}`), ...edges.map((b) => `edge: ${b.note}`)],
    mayExpire: edges.some((e) => e.note.startsWith('start at the retention')),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Building and encoding

/** The span itself: its own attributes, the foreign ones and the extras, in the contract's order. */
export function buildSpan(
  c: SpanCase,
  ids: { traceId: string; spanId: string },
  times: { start: bigint; end: bigint },
): { span: OtlpSpan; resource: AttrMap } {
  const attributes: AttrMap = {};
  const put = (map: AttrMap, key: string, val: Val | undefined) => {
    if (val && val.v !== undefined) map[key] = val.v;
  };
  put(attributes, Attr.contractVersion, c.attrs[Attr.contractVersion]);
  put(attributes, Attr.requestId, c.attrs[Attr.requestId]);
  put(attributes, Attr.generation, c.attrs[Attr.generation]);
  const own = (SPAN_NAMES as readonly string[]).includes(c.name) ? OWN_ATTRS[c.name as SpanName] : [];
  for (const s of own) put(attributes, s.key, c.attrs[s.key]);
  for (const key of c.foreign) put(attributes, key, c.attrs[key]);
  for (const [key, v] of Object.entries(c.extras)) if (!(key in attributes)) attributes[key] = v;
  const resource: AttrMap = {};
  for (const [key, val] of Object.entries(c.resource)) put(resource, key, val);
  const span: OtlpSpan = {
    traceId: ids.traceId,
    spanId: ids.spanId,
    parentSpanId: '',
    name: c.name,
    kind: 1,
    startTimeUnixNano: times.start,
    endTimeUnixNano: times.end,
    attributes,
    statusCode: 0,
    statusMessage: '',
  };
  return { span, resource };
}

function unmark(map: AttrMap): AttrMap {
  const out: AttrMap = {};
  for (const [k, v] of Object.entries(map)) out[k] = markedDouble(v) ?? v;
  return out;
}

/**
 * A request of two ResourceSpans, the fuzzed span's and a valid neighbour's, encoded with the contract's encoders.
 * In JSON, integral doubles are written as `doubleValue`, and with `jsonNumbers` the fuzzed span's 64-bit integers
 * as JSON numbers (the neighbour's stay strings).
 */
export function encodeRequest(
  fuzzed: OtlpResourceSpans,
  neighbour: OtlpResourceSpans,
  encoding: 'protobuf' | 'json',
  jsonNumbers: boolean,
): Buffer {
  if (encoding === 'protobuf') {
    const plain: OtlpResourceSpans = {
      resource: unmark(fuzzed.resource),
      scopeSpans: fuzzed.scopeSpans.map((ss) => ({
        scope: ss.scope,
        spans: ss.spans.map((s) => ({ ...s, attributes: unmark(s.attributes) })),
      })),
    };
    return Buffer.from(encodeOtlpProtobuf({ resourceSpans: [plain, neighbour] }));
  }
  const prefix = '{"resourceSpans":[';
  const item = (rs: OtlpResourceSpans) => {
    const text = encodeOtlpJson({ resourceSpans: [rs] });
    if (!text.startsWith(prefix) || !text.endsWith(']}')) throw new Error(`unexpected OTLP/JSON shape: ${text.slice(0, 40)}`);
    return text.slice(prefix.length, -2);
  };
  const marker = JSON.stringify(DOUBLE_MARKER).slice(1, -1);
  let text = item(fuzzed).replace(new RegExp(`\\{"stringValue":"${escapeRe(marker)}(\\d+)"\\}`, 'g'), '{"doubleValue":$1}');
  if (jsonNumbers)
    text = text
      .replace(/"(startTimeUnixNano|endTimeUnixNano)":"(\d+)"/g, '"$1":$2')
      .replace(/\{"intValue":"(-?\d+)"\}/g, '{"intValue":$1}');
  return Buffer.from(`${prefix}${text},${item(neighbour)}]}`);
}
