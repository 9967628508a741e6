/**
 * OTLP/HTTP protobuf decoder for traces: `ExportTraceServiceRequest` bytes -> {@link OtlpTraceRequest}. The walk
 * over the request is ours, straight from the wire into the model (protobufjs's Reader reads the bytes): 64-bit
 * values stay exact, hostile input ends as an InputError, with {@link DecodeLimits} nothing is allocated past the
 * limits (a 4 MB body of empty values must not become a million objects), and each span's bytes stay a view.
 */
import { InputError } from '../common/errors.ts';
import type { OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
import {
  DECODE_COST as COST,
  DecodeBudget,
  emptySpan,
  LimitError,
  NO_ATTRIBUTES,
  type BoundedDecode,
  type DecodeLimits,
} from './otlp-limits.ts';
import { Bad, PbValues } from './otlp-decode-values.ts';
import { wireFailure } from './otlp-decode-wire.ts';

export function decodeOtlpProtobuf(body: Uint8Array): OtlpTraceRequest {
  return decodeWith(body, undefined, false).request;
}

/**
 * Decodes within `limits`: more spans or a larger decoded form than allowed throw a {@link LimitError};
 * attributes past the count or value limits are skipped without decoding and their map reported in `cut`;
 * ResourceSpans and ScopeSpans without spans are dropped; spans outside `attributesOnlyWithPrefix` carry no
 * attributes.
 */
export function decodeOtlpProtobufBounded(body: Uint8Array, limits: DecodeLimits): BoundedDecode {
  return decodeWith(body, new DecodeBudget(limits), true);
}

function decodeWith(body: Uint8Array, budget: DecodeBudget | undefined, keepSpanBytes: boolean): BoundedDecode {
  if (!(body instanceof Uint8Array)) throw new InputError('protobuf: body must be bytes');
  // A Buffer for native UTF-8 and hex decoding of slices.
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  // Only a forwarder (the collector, through the bounded decode) passes spans on: a reader's decode keeps no views.
  const decoder = new PbDecoder(buf, budget, keepSpanBytes);
  try {
    return { request: decoder.request(), cut: decoder.cut, spanBytes: decoder.spanBytes };
  } catch (err) {
    if (err instanceof LimitError) throw err;
    const failure = wireFailure(err);
    if (failure !== undefined) throw new InputError(`protobuf: ${failure}`);
    if (err instanceof Bad) throw new InputError(`protobuf: ${decoder.where()}.${err.message}`);
    // The recursion is bounded (16 AnyValue levels, 100 group levels), but a stack overflow must still end as bad input.
    if (err instanceof RangeError && err.message.includes('call stack')) throw new InputError('protobuf: nesting too deep', { cause: err });
    throw err;
  }
}

/** One pass over an ExportTraceServiceRequest (the semantics are PbValues's). */
class PbDecoder extends PbValues {
  // Where the decoder is, for the location of a Bad: k is -1 outside a span list.
  private i = 0;
  private j = 0;
  private k = -1;
  readonly spanBytes = new Map<OtlpSpan, Uint8Array>();

  constructor(
    buf: Buffer,
    budget: DecodeBudget | undefined,
    private readonly keepSpanBytes: boolean,
  ) {
    super(buf, budget);
  }

  where(): string {
    return this.k >= 0 ? `resourceSpans[${this.i}].scopeSpans[${this.j}].spans[${this.k}]` : `resourceSpans[${this.i}].resource`;
  }

  request(): OtlpTraceRequest {
    const r = this.r;
    const resourceSpans: OtlpResourceSpans[] = [];
    for (let i = 0; r.pos < r.len;) {
      const tag = r.tag();
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited();
        this.i = i++;
        const rs = this.resourceSpans(stop);
        if (rs) resourceSpans.push(rs);
      } else this.skip(tag);
    }
    return { resourceSpans };
  }

  private resourceSpans(end: number): OtlpResourceSpans | undefined {
    const r = this.r;
    const outer = this.enter(end);
    // The resource is decoded last, and only for ResourceSpans that hold spans when limits apply.
    let resources: number[] | undefined;
    const scopeSpans: OtlpScopeSpans[] = [];
    for (let j = 0; r.pos < end;) {
      const tag = r.tag();
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited();
        (resources ??= []).push(r.pos, stop);
        r.pos = stop;
      } else if (tag === ((2 << 3) | 2)) {
        const stop = this.delimited();
        this.j = j++;
        const ss = this.scopeSpans(stop);
        if (ss) scopeSpans.push(ss);
      } else this.skip(tag);
    }
    this.k = -1;
    if (this.budget && scopeSpans.length === 0) {
      this.leave(outer);
      return undefined;
    }
    this.budget?.charge(COST.resourceSpans);
    const resource = resources ? this.attributes(this.resourceKeyValues(resources)) : this.newMap();
    r.pos = end;
    this.leave(outer);
    return { resource, scopeSpans };
  }

  /** The KeyValue positions (start, end pairs) of a ResourceSpans's Resource messages (merged when repeated). */
  private resourceKeyValues(resources: number[]): number[] {
    const r = this.r;
    const keyValues: number[] = [];
    for (let n = 0; n < resources.length; n += 2) {
      r.pos = resources[n]!;
      const stop = resources[n + 1]!;
      const outer = this.enter(stop);
      while (r.pos < stop) {
        const tag = r.tag();
        if (tag === ((1 << 3) | 2)) {
          const kvEnd = this.delimited();
          keyValues.push(r.pos, kvEnd);
          r.pos = kvEnd;
        } else this.skip(tag);
      }
      this.leave(outer);
    }
    return keyValues;
  }

  private scopeSpans(end: number): OtlpScopeSpans | undefined {
    const r = this.r;
    const outer = this.enter(end);
    const scope = { name: '', version: '' };
    const spans: OtlpSpan[] = [];
    for (let k = 0; r.pos < end;) {
      const tag = r.tag();
      if (tag === ((2 << 3) | 2)) {
        const stop = this.delimited();
        this.k = k++;
        spans.push(this.span(stop));
        this.k = -1;
      } else if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited();
        // InstrumentationScope: name and version; its attributes have no place in the model.
        const scopeOuter = this.enter(stop);
        while (r.pos < stop) {
          const t = r.tag();
          if (t === ((1 << 3) | 2)) scope.name = this.string();
          else if (t === ((2 << 3) | 2)) scope.version = this.string();
          else this.skip(t);
        }
        this.leave(scopeOuter);
      } else this.skip(tag);
    }
    this.leave(outer);
    if (this.budget && spans.length === 0) return undefined;
    this.budget?.charge(COST.scopeSpans + scope.name.length + scope.version.length);
    return { scope, spans };
  }

  private span(end: number): OtlpSpan {
    const r = this.r;
    const start = r.pos;
    const outer = this.enter(end);
    const budget = this.budget;
    budget?.countSpan();
    const span = emptySpan(NO_ATTRIBUTES);
    // KeyValue positions (start, end pairs): attributes are decoded once the name is known.
    let keyValues: number[] | undefined;
    while (r.pos < end) {
      const tag = r.tag();
      switch (tag) {
        case (1 << 3) | 2:
          span.traceId = this.hex();
          break;
        case (2 << 3) | 2:
          span.spanId = this.hex();
          break;
        case (4 << 3) | 2:
          span.parentSpanId = this.hex();
          break;
        case (5 << 3) | 2:
          span.name = this.string();
          break;
        case (6 << 3) | 0:
          span.kind = r.int32();
          break;
        case (7 << 3) | 1:
          span.startTimeUnixNano = this.fixed64();
          break;
        case (8 << 3) | 1:
          span.endTimeUnixNano = this.fixed64();
          break;
        case (9 << 3) | 2: {
          const stop = this.delimited();
          (keyValues ??= []).push(r.pos, stop);
          r.pos = stop;
          break;
        }
        case (15 << 3) | 2:
          this.status(span, this.delimited());
          break;
        default:
          this.skip(tag);
      }
    }
    if (budget) {
      budget.charge(COST.span + span.name.length);
      const prefix = budget.limits.attributesOnlyWithPrefix;
      if (prefix !== undefined && !span.name.startsWith(prefix)) {
        this.leave(outer);
        return span;
      }
    }
    span.attributes = keyValues ? this.attributes(keyValues) : this.newMap();
    r.pos = end;
    this.leave(outer);
    if (this.keepSpanBytes) this.spanBytes.set(span, this.buf.subarray(start, end));
    return span;
  }

  private status(span: OtlpSpan, end: number): void {
    const r = this.r;
    const outer = this.enter(end);
    while (r.pos < end) {
      const t = r.tag();
      if (t === ((2 << 3) | 2)) span.statusMessage = this.string();
      else if (t === ((3 << 3) | 0)) span.statusCode = r.int32();
      else this.skip(t);
    }
    this.leave(outer);
  }
}
