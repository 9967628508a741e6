import {
  assembleOtlpProtobuf,
  clipText,
  encodeOtlpJson,
  encodeOtlpResource,
  encodeOtlpScope,
  encodeOtlpSpan,
  LimitError,
  type Cut,
  type EncodedResourceSpans,
  DEAD_LETTER_HEADERS,
  MESSAGE_HEADERS,
  partitionKey,
  spanTimeWindow,
  validateSpan,
  type AttrMap,
  type AttrValue,
  type OtlpScopeSpans,
  type OtlpSpan,
  type OtlpTraceRequest,
  type SpanTimeWindow,
  type DeadLetter,
  type SpanMessage,
} from '../contract/index.ts';

export interface Rejection {
  spanName: string;
  field: string;
  reason: string;
}

export interface Triage {
  received: number;
  notOurs: number;
  accepted: number;
  messages: SpanMessage[];
  rejections: Rejection[];
  deadLetters: DeadLetter[];
}

export interface TriageLimits {
  /** Longest string (characters) or bytes value, and most values an array or key-value list holds, nested ones counted. */
  maxAttributeLength: number;
  /** Most attributes on a span or a resource (default 128). */
  maxAttributes?: number;
  /** Largest Kafka record batch produced, which bounds each message (default 1000000). */
  maxMessageBytes?: number;
  /**
   * Most bytes of Kafka messages and dead letters one request may make (default unbounded): each lifecycle's
   * message repeats its spans' resource, so a small body can ask for much more. Past it triage throws a
   * LimitError (413) before building the messages.
   */
  maxRequestKafkaBytes?: number;
  /** Dead letters of one request carry their span until they take this many bytes; later ones only the reason (default 4 MiB). */
  maxDeadLetterBytes?: number;
  /**
   * How far ahead of the time the request was received a span's start or end may be (ms). With `retentionDays`, the
   * time rules: when either is given, spans outside the window are rejected (the other taking its default,
   * contract/limits.ts); when neither is, only what can be stored is checked.
   */
  maxClockSkewMs?: number;
  /** Spans that started more than this many days before the request was received are rejected (see `maxClockSkewMs`). */
  retentionDays?: number;
}

// The Kafka message contract is the contract's (contract/kafka-message.ts): the pipeline reads what these declare.

/** Kafka's framing of one record beyond its key, value and headers (length, attributes, deltas), rounded up. */
const RECORD_OVERHEAD_BYTES = 32;
/** A record batch's own header: 61 bytes in Kafka's v2 format, rounded up. */
export const BATCH_OVERHEAD_BYTES = 128;

/** Bytes a message takes in a Kafka record batch (an upper bound): key, value, headers and framing. */
export function recordBytes(key: string | null, valueBytes: number, headers: Readonly<Record<string, string>>): number {
  let bytes = RECORD_OVERHEAD_BYTES + valueBytes + (key === null ? 0 : Buffer.byteLength(key));
  for (const name in headers) bytes += 10 + Buffer.byteLength(name) + Buffer.byteLength(headers[name] as string);
  return bytes;
}

/** The longest reason a rejection gives, and the longest span name it quotes. */
const MAX_REASON = 1024;
const MAX_SPAN_NAME = 256;

const clusterOf = (resource: AttrMap) => (typeof resource['pd.cluster'] === 'string' ? (resource['pd.cluster'] as string) : 'default');

const NO_CUTS: ReadonlyMap<AttrMap, Cut> = new Map();
const NO_SPAN_BYTES: ReadonlyMap<OtlpSpan, Uint8Array> = new Map();

/** An upper bound of the bytes a length-delimited field of `length` bytes takes (tag, and a length of at most 5 bytes). */
const field = (length: number) => length + 6;

/**
 * Splits one OTLP request into Kafka messages per lifecycle key, rejections, and spans that are not ours.
 * A PD span is rejected (and dead-lettered) when it breaks the contract, when an attribute of its own or of
 * its resource exceeds the limits (or was cut short while decoding: `cut`), or when it alone would make a
 * message over `maxMessageBytes`.
 */
// eslint-disable-next-line max-lines-per-function -- one pass over the request, each span's verdict beside the caches it fills (resource and scope bytes); packing is packMessages
export function triage(
  request: OtlpTraceRequest,
  limits: TriageLimits,
  receivedAt = new Date(),
  cut: ReadonlyMap<AttrMap, Cut> = NO_CUTS,
  spanBytes: ReadonlyMap<OtlpSpan, Uint8Array> = NO_SPAN_BYTES,
): Triage {
  const maxAttributes = limits.maxAttributes ?? 128;
  const maxMessageBytes = limits.maxMessageBytes ?? 1_000_000;
  const maxRequestKafkaBytes = limits.maxRequestKafkaBytes ?? Infinity;
  const deadLetters = new DeadLetters(receivedAt, cut, limits.maxDeadLetterBytes ?? 4 * 1024 * 1024);
  /** What one record may take: the batch holding only it must fit maxMessageBytes. */
  const recordBudget = maxMessageBytes - BATCH_OVERHEAD_BYTES;
  const window = timeWindow(limits, receivedAt);
  const out: Triage = { received: 0, notOurs: 0, accepted: 0, messages: [], rejections: [], deadLetters: [] };
  const resources = new Map<AttrMap, { problem: Cut | undefined; bytes?: Uint8Array }>();
  const scopes = new Map<OtlpScopeSpans['scope'], Uint8Array>();
  // key -> resource -> scope -> encoded spans, so each message keeps the spans' own resource and scope.
  const byKey: SpansByKey = new Map();
  for (const rs of request.resourceSpans) {
    let resource = resources.get(rs.resource);
    for (const ss of rs.scopeSpans) {
      for (const span of ss.spans) {
        out.received++;
        const result = validateSpan(span, rs.resource, window);
        if (result.status === 'not_ours') {
          out.notOurs++;
          continue;
        }
        let rejection: Rejection | undefined;
        // An attribute map cut short while decoding comes first: what the validator saw of it is incomplete.
        const decodeCut = cut.get(rs.resource) ?? cut.get(span.attributes);
        if (decodeCut) {
          const where = cut.has(rs.resource) ? 'resource: ' : '';
          rejection = {
            spanName: clipText(span.name, MAX_SPAN_NAME),
            field: decodeCut.field,
            reason: clipText(where + decodeCut.reason, MAX_REASON),
          };
        } else if (result.status === 'invalid') {
          rejection = {
            spanName: clipText(result.spanName, MAX_SPAN_NAME),
            field: result.field,
            reason: clipText(result.reason, MAX_REASON),
          };
        } else {
          if (!resource) {
            const problem = attributeProblem(rs.resource, cut, limits.maxAttributeLength, maxAttributes);
            resource = { problem: problem && { field: problem.field, reason: `resource: ${problem.reason}` } };
            resources.set(rs.resource, resource);
          }
          const problem = resource.problem ?? attributeProblem(span.attributes, cut, limits.maxAttributeLength, maxAttributes);
          if (problem)
            rejection = {
              spanName: clipText(span.name, MAX_SPAN_NAME),
              field: problem.field,
              reason: clipText(problem.reason, MAX_REASON),
            };
        }
        let bytes: Uint8Array | undefined;
        let key = '';
        if (!rejection && resource) {
          key = partitionKey(clusterOf(rs.resource), span.attributes['pd.request.id'] as string);
          try {
            resource.bytes ??= encodeOtlpResource(rs.resource);
            let scope = scopes.get(ss.scope);
            if (!scope) scopes.set(ss.scope, (scope = encodeOtlpScope(ss.scope)));
            // A protobuf span goes on as it came: encoding it again took a third of decode and triage (docs/collector.md).
            bytes = spanBytes.get(span) ?? encodeOtlpSpan(span);
            const alone = recordBytes(
              key,
              field(field(resource.bytes.length) + field(field(scope.length) + field(bytes.length))),
              MESSAGE_HEADERS,
            );
            if (alone > recordBudget) {
              rejection = {
                spanName: clipText(span.name, MAX_SPAN_NAME),
                field: 'message_size',
                reason: `the span takes ${alone} bytes in a Kafka message with its resource and scope, more than the limit of ${recordBudget}`,
              };
            }
          } catch (error) {
            rejection = {
              spanName: clipText(span.name, MAX_SPAN_NAME),
              field: 'encoding',
              reason: clipText(`cannot encode the span: ${(error as Error).message}`, MAX_REASON),
            };
          }
        }
        if (rejection || !bytes) {
          rejection ??= { spanName: clipText(span.name, MAX_SPAN_NAME), field: 'encoding', reason: 'cannot encode the span' };
          out.rejections.push(rejection);
          out.deadLetters.push(deadLetters.make(span, rs.resource, ss.scope, rejection, recordBudget));
          if (deadLetters.bytes > maxRequestKafkaBytes) throw tooMuchKafka(deadLetters.bytes, maxRequestKafkaBytes);
          continue;
        }
        out.accepted++;
        const byResource = byKey.get(key) ?? new Map<AttrMap, Map<OtlpScopeSpans['scope'], Uint8Array[]>>();
        byKey.set(key, byResource);
        const byScope = byResource.get(rs.resource) ?? new Map<OtlpScopeSpans['scope'], Uint8Array[]>();
        byResource.set(rs.resource, byScope);
        const spans = byScope.get(ss.scope) ?? [];
        byScope.set(ss.scope, spans);
        spans.push(bytes);
      }
    }
  }
  out.messages.push(...packMessages(byKey, resources, scopes, recordBudget, deadLetters.bytes, maxRequestKafkaBytes));
  return out;
}

type SpansByKey = Map<string, Map<AttrMap, Map<OtlpScopeSpans['scope'], Uint8Array[]>>>;

/**
 * The accepted spans of each key, in arrival order (per resource and scope), packed into as few messages as fit the
 * record budget. The messages are planned first, so that a request whose messages and dead letters together exceed
 * `maxRequestKafkaBytes` is refused before any is built.
 */
function packMessages(
  byKey: SpansByKey,
  resources: ReadonlyMap<AttrMap, { bytes?: Uint8Array }>,
  scopes: ReadonlyMap<OtlpScopeSpans['scope'], Uint8Array>,
  recordBudget: number,
  deadLetterBytes: number,
  maxRequestKafkaBytes: number,
): SpanMessage[] {
  const plans: { key: string; message: EncodedResourceSpans[]; spans: number; size: number }[] = [];
  let total = deadLetterBytes;
  for (const [key, byResource] of byKey) {
    const overhead = recordBytes(key, 0, MESSAGE_HEADERS);
    const valueBudget = recordBudget - overhead;
    let plan: (typeof plans)[number] | undefined;
    for (const [resource, byScope] of byResource) {
      const resourceBytes = resources.get(resource)?.bytes as Uint8Array;
      let rs: EncodedResourceSpans | undefined;
      for (const [scope, list] of byScope) {
        const scopeBytes = scopes.get(scope) as Uint8Array;
        let ss: EncodedResourceSpans['scopeSpans'][number] | undefined;
        for (const span of list) {
          const cost = () =>
            field(span.length) + (ss ? 0 : field(field(scopeBytes.length))) + (rs ? 0 : field(field(resourceBytes.length)));
          if (!plan || (plan.spans > 0 && plan.size + cost() > valueBudget)) {
            plans.push((plan = { key, message: [], spans: 0, size: 0 }));
            total += overhead;
            rs = undefined;
            ss = undefined;
          }
          const added = cost();
          plan.size += added;
          total += added;
          if (!rs) plan.message.push((rs = { resource: resourceBytes, scopeSpans: [] }));
          if (!ss) rs.scopeSpans.push((ss = { scope: scopeBytes, spans: [] }));
          ss.spans.push(span);
          plan.spans++;
        }
      }
    }
  }
  if (total > maxRequestKafkaBytes) throw tooMuchKafka(total, maxRequestKafkaBytes);
  return plans.map((plan) => ({ key: plan.key, value: assembleOtlpProtobuf(plan.message), spans: plan.spans }));
}

/** The times triage takes, from the request's arrival; undefined when the limits set no time rule. */
function timeWindow(limits: TriageLimits, receivedAt: Date): SpanTimeWindow | undefined {
  if (limits.maxClockSkewMs === undefined && limits.retentionDays === undefined) return undefined;
  return spanTimeWindow(receivedAt.getTime(), limits.maxClockSkewMs, limits.retentionDays);
}

function tooMuchKafka(bytes: number, max: number): LimitError {
  return new LimitError(
    `the request's spans would take more than ${bytes} bytes of Kafka messages (every lifecycle's message repeats its resource), more than the limit of ${max}; send smaller batches`,
  );
}

/**
 * Why an attribute map breaks the limits, or undefined: cut while decoding, more than `maxAttributes`
 * attributes, or one value too long (see {@link valueProblem}).
 */
export function attributeProblem(
  attrs: AttrMap,
  cut: ReadonlyMap<AttrMap, Cut>,
  maxLength: number,
  maxAttributes: number,
): Cut | undefined {
  const decoded = cut.get(attrs);
  if (decoded) return decoded;
  let count = 0;
  for (const key in attrs) {
    count++;
    if (key.length > maxLength)
      return {
        field: 'attribute_length',
        reason: `${clipText(key)}: a key of ${key.length} characters, more than the limit of ${maxLength}`,
      };
    const problem = valueProblem(attrs[key] as AttrValue, maxLength);
    if (problem) return { field: 'attribute_length', reason: `${clipText(key)}: ${problem}` };
  }
  if (count > maxAttributes) return { field: 'attribute_count', reason: `${count} attributes, more than the limit of ${maxAttributes}` };
  return undefined;
}

/**
 * Why one attribute value is too long, or undefined: a string longer than `max` characters, bytes longer than
 * `max` bytes, or an array or key-value list holding more than `max` values, nested ones counted (and no
 * string, bytes or key in it longer than `max`).
 */
export function valueProblem(value: AttrValue, max: number): string | undefined {
  if (typeof value === 'string')
    return value.length > max ? `a string of ${value.length} characters, more than the limit of ${max}` : undefined;
  if (value instanceof Uint8Array) return value.length > max ? `${value.length} bytes, more than the limit of ${max}` : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  const kind = Array.isArray(value) ? 'an array' : 'a key-value list';
  const items = Array.isArray(value) ? value : Object.values(value);
  if (items.length > max) {
    return `${Array.isArray(value) ? `an array of ${items.length} items` : `a key-value list of ${items.length} entries`}, more than the limit of ${max} values`;
  }
  let left = max;
  const visit = (v: AttrValue): string | undefined => {
    if (--left < 0) return `${kind} holding more than the limit of ${max} values (nested ones counted)`;
    if (typeof v === 'string')
      return v.length > max ? `${kind} holding a string of ${v.length} characters, more than the limit of ${max}` : undefined;
    if (v instanceof Uint8Array) return v.length > max ? `${kind} holding ${v.length} bytes, more than the limit of ${max}` : undefined;
    if (v === null || typeof v !== 'object') return undefined;
    if (!Array.isArray(v)) {
      for (const key in v) if (key.length > max) return `${kind} holding a key of ${key.length} characters, more than the limit of ${max}`;
    }
    for (const item of Array.isArray(v) ? v : Object.values(v)) {
      const problem = visit(item);
      if (problem) return problem;
    }
    return undefined;
  };
  if (!Array.isArray(value)) {
    for (const key in value)
      if (key.length > max) return `${kind} holding a key of ${key.length} characters, more than the limit of ${max}`;
  }
  for (const item of items) {
    const problem = visit(item);
    if (problem) return problem;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------
// Dead letters

/** What a dead letter shows of a rejected span: enough to find and fix the sender, never megabytes. */
const SHOWN = { chars: 256, idChars: 64, items: 32, attributes: 64, values: 1024, totalChars: 32_768, notes: 16 } as const;

/** Builds shortened copies of a span's parts for its dead letter, noting every cut. */
class Shortener {
  readonly notes: string[] = [];
  private moreNotes = 0;
  private valuesLeft: number = SHOWN.values;
  private charsLeft: number = SHOWN.totalChars;

  note(text: string): void {
    if (this.notes.length < SHOWN.notes) this.notes.push(text);
    else this.moreNotes++;
  }

  finish(): string[] {
    if (this.moreNotes > 0) this.notes.push(`and ${this.moreNotes} more cuts`);
    return this.notes;
  }

  text(s: string, where: string, max: number = SHOWN.chars): string {
    const keep = Math.max(0, Math.min(s.length, max, this.charsLeft));
    this.charsLeft -= keep;
    if (keep === s.length) return s;
    this.note(`${where}: ${s.length} characters, the first ${keep} kept`);
    return s.slice(0, keep);
  }

  /** Lower-case hex of whole bytes. */
  hex(s: string, where: string): string {
    if (s.length <= SHOWN.idChars) return s;
    this.note(`${where}: ${s.length / 2} bytes, the first ${SHOWN.idChars / 2} kept`);
    return s.slice(0, SHOWN.idChars);
  }

  /** A copy of `map` within the limits; `where` names it in notes (`attributes`, `resource`). */
  map(map: AttrMap, where: string, cut: Cut | undefined): AttrMap {
    if (cut) this.note(`${where}: cut while decoding (${cut.reason}); only what was decoded is shown`);
    const copy: AttrMap = Object.create(null);
    let count = 0;
    let shown = 0;
    for (const key in map) {
      count++;
      if (shown >= SHOWN.attributes || this.valuesLeft <= 0) continue;
      shown++;
      const name = key.length > SHOWN.chars ? this.text(key, `${where} key ${JSON.stringify(key.slice(0, 40))}…`) : key;
      copy[name] = this.value(map[key] as AttrValue, `${where}[${JSON.stringify(clipText(key, 40))}]`);
    }
    if (shown < count) this.note(`${where}: ${count} attributes, the first ${shown} kept`);
    return copy;
  }

  private value(v: AttrValue, where: string): AttrValue {
    this.valuesLeft--;
    if (typeof v === 'string') return this.text(v, where);
    if (v instanceof Uint8Array) {
      const keep = Math.max(0, Math.min(v.length, SHOWN.chars, this.charsLeft));
      this.charsLeft -= keep;
      if (keep === v.length) return v;
      this.note(`${where}: ${v.length} bytes, the first ${keep} kept`);
      return v.slice(0, keep);
    }
    if (v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) {
      const keep = Math.max(0, Math.min(v.length, SHOWN.items, this.valuesLeft));
      if (keep < v.length) this.note(`${where}: an array of ${v.length} items, the first ${keep} kept`);
      const copy: AttrValue[] = [];
      for (let i = 0; i < keep && this.valuesLeft > 0; i++) copy.push(this.value(v[i] as AttrValue, `${where}[${i}]`));
      return copy;
    }
    const keys = Object.keys(v);
    const keep = Math.max(0, Math.min(keys.length, SHOWN.items, this.valuesLeft));
    if (keep < keys.length) this.note(`${where}: a key-value list of ${keys.length} entries, the first ${keep} kept`);
    const copy: AttrMap = Object.create(null);
    for (let i = 0; i < keep && this.valuesLeft > 0; i++) {
      const key = keys[i] as string;
      copy[this.text(key, `${where} key`)] = this.value(v[key] as AttrValue, `${where}[${JSON.stringify(clipText(key, 40))}]`);
    }
    return copy;
  }
}

/**
 * Dead letters of one request. Each is `{reason, field, span_name, received_at, truncated?, otlp}`, where
 * `otlp` is the span with its resource as OTLP/JSON, shortened (long values, many items or attributes) so the
 * letter stays small; `truncated` then lists what was cut and how long it was. Once the request's letters
 * take `maxBytes`, later ones leave `otlp` out (null): a request of many bad spans under a large resource
 * must not turn into gigabytes of letters.
 */
class DeadLetters {
  bytes = 0;

  constructor(
    private readonly receivedAt: Date,
    private readonly cut: ReadonlyMap<AttrMap, Cut>,
    private readonly maxBytes: number,
  ) {}

  make(span: OtlpSpan, resource: AttrMap, scope: OtlpScopeSpans['scope'], rejection: Rejection, budget: number): DeadLetter {
    const requestId = span.attributes['pd.request.id'];
    const cluster = clusterOf(resource);
    // The validator bounds ids of accepted spans; a rejected one's may be anything, so only a sane one makes the key.
    const key =
      typeof requestId === 'string' && requestId.length <= 1024 && cluster.length <= 1024 ? partitionKey(cluster, requestId) : null;
    const s = new Shortener();
    const head = () => ({
      reason: rejection.reason,
      field: rejection.field,
      span_name: rejection.spanName,
      received_at: this.receivedAt.toISOString(),
    });
    let value: Buffer | undefined;
    if (this.bytes < this.maxBytes) {
      const shortSpan: OtlpSpan = {
        ...span,
        traceId: s.hex(span.traceId, 'traceId'),
        spanId: s.hex(span.spanId, 'spanId'),
        parentSpanId: s.hex(span.parentSpanId, 'parentSpanId'),
        name: s.text(span.name, 'name'),
        statusMessage: s.text(span.statusMessage, 'status.message'),
        attributes: s.map(span.attributes, 'attributes', this.cut.get(span.attributes)),
      };
      const shortScope = { name: s.text(scope.name, 'scope.name'), version: s.text(scope.version, 'scope.version') };
      const shortResource = s.map(resource, 'resource', this.cut.get(resource));
      const notes = s.finish();
      let otlp: string;
      try {
        otlp = encodeOtlpJson({ resourceSpans: [{ resource: shortResource, scopeSpans: [{ scope: shortScope, spans: [shortSpan] }] }] });
      } catch (error) {
        otlp = JSON.stringify({ error: clipText(`cannot encode the span: ${(error as Error).message}`, MAX_REASON) });
      }
      // The head's JSON with `otlp` spliced in last, so the span's JSON is written once, not parsed back.
      value = Buffer.from(
        `${JSON.stringify({ ...head(), ...(notes.length > 0 ? { truncated: notes } : {}) }).slice(0, -1)},"otlp":${otlp}}`,
      );
      // Only with a very small message limit is that too much: then the letter goes without the span.
      if (recordBytes(key, value.length, DEAD_LETTER_HEADERS) > budget) value = undefined;
    }
    if (!value) {
      const why = this.bytes < this.maxBytes ? 'over the message size limit' : `this request's dead letters passed ${this.maxBytes} bytes`;
      const ids = { trace_id: s.hex(span.traceId, 'traceId'), span_id: s.hex(span.spanId, 'spanId') };
      value = Buffer.from(JSON.stringify({ ...head(), ...ids, truncated: [`otlp: left out, ${why}`], otlp: null }));
    }
    this.bytes += recordBytes(key, value.length, DEAD_LETTER_HEADERS);
    return { key, value };
  }
}

/** The partial-success message for rejected spans: the count and the first few reasons. */
export function rejectionSummary(rejections: Rejection[], shown = 3): string {
  // Triage clips names and reasons already; the margin keeps a clipped one from being clipped (and annotated) twice.
  const first = rejections
    .slice(0, shown)
    .map((r) => `${clipText(r.spanName, MAX_SPAN_NAME + 64)}: ${clipText(r.reason, MAX_REASON + 64)}`);
  const more = rejections.length > shown ? ` (and ${rejections.length - shown} more)` : '';
  return `${rejections.length} PD span(s) rejected: ${first.join('; ')}${more}`;
}
