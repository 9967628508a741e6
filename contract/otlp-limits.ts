/**
 * What an OTLP decode may allocate, shared by the protobuf and the JSON decoder: the limits, the rough cost of
 * the model's parts, and the budget a bounded decode charges as it builds them, so that both encodings refuse
 * and cut the same requests with the same words.
 */
import { InputError } from '../common/errors.ts';
import type { AttrMap, AttrValue, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';

/** Deepest nesting of AnyValue arrays/kvlists accepted in either encoding. */
export const MAX_ANY_VALUE_DEPTH = 16;

/**
 * Bounds on what one decode may allocate, for a receiver of untrusted bodies. Without them a decode is
 * faithful and unbounded (a body of N bytes can become 50 N bytes of objects).
 */
export interface DecodeLimits {
  /** Most spans in the request; one more ends the decode with a {@link LimitError}. */
  maxSpans: number;
  /** Most attributes kept per span or resource; past it the map is cut (see {@link BoundedDecode.cut}). */
  maxAttributes: number;
  /** Most values one attribute holds, nested array items and key-value entries counted; past it the value is cut. */
  maxValueItems: number;
  /** Rough bytes the decoded request may take in memory; past it the decode ends with a {@link LimitError}. */
  maxDecodedBytes: number;
  /** When set, spans whose name lacks this prefix come without attributes (the receiver only counts them). */
  attributesOnlyWithPrefix?: string;
}

/** Why an attribute map was cut short while decoding; every span under it breaks the limits. */
export interface Cut {
  field: 'attribute_count' | 'attribute_length';
  /** Says what was there, e.g. `x.pages: an array of 900000 items, more than the limit of 4096 values`. */
  reason: string;
}

export interface BoundedDecode {
  request: OtlpTraceRequest;
  /**
   * Attribute maps (of spans or resources) that the limits cut short: they hold only what fit, so their
   * spans must be rejected, with this reason, never forwarded as they are.
   */
  cut: Map<AttrMap, Cut>;
  /**
   * Each decoded span's own protobuf bytes (a view of the body, not a copy), for a forwarder to pass on as they came
   * rather than encode the decoded span again: they decode to the same span, and keep what the model has no place
   * for (events, links, unknown fields). Spans outside `attributesOnlyWithPrefix` have none; a JSON decode, none at all.
   */
  spanBytes?: ReadonlyMap<OtlpSpan, Uint8Array>;
}

/** A body within the size limit whose content still exceeds a decode limit: too large (413), not malformed. */
export class LimitError extends InputError {}

/** Rough V8 sizes (64-bit heap) of the model's parts, for DecodeLimits.maxDecodedBytes: an estimate, charged as they are built. */
export const DECODE_COST = {
  span: 400,
  scopeSpans: 200,
  resourceSpans: 300,
  map: 200,
  entry: 48,
  string: 24,
  bytes: 200,
  array: 40,
  slot: 8,
  number: 16,
  bigint: 32,
  /** An object or array JSON.parse builds (measured: about 80 bytes), before the JSON decoder turns it into the model. */
  jsonContainer: 80,
} as const;

/** Shared by spans decoded without attributes: never written to. */
export const NO_ATTRIBUTES: AttrMap = Object.freeze(Object.create(null) as AttrMap);

/** A span with every field at its protobuf default, for a decoder to fill in. */
export function emptySpan(attributes: AttrMap): OtlpSpan {
  return {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startTimeUnixNano: 0n,
    endTimeUnixNano: 0n,
    attributes,
    statusCode: 0,
    statusMessage: '',
  };
}

/** Text of a key or name for a message: at most `max` characters, saying how long it was when longer. */
export function clipText(text: string, max = 128): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}

/** What a bounded decode has used so far, charged by either decoder as it builds the model. */
export class DecodeBudget {
  spans = 0;
  cost = 0;
  /** Values the top-level attribute being decoded may still hold (DecodeLimits.maxValueItems). */
  itemsLeft = Infinity;
  /** Items of the top-level array or key-value list being decoded, skipped ones included. */
  topItems = 0;
  readonly cut = new Map<AttrMap, Cut>();

  constructor(readonly limits: DecodeLimits) {}

  charge(bytes: number): void {
    if ((this.cost += bytes) > this.limits.maxDecodedBytes) {
      throw new LimitError(
        `the request takes more than ${Math.round(this.limits.maxDecodedBytes / 1048576)} MiB of memory once decoded (too many spans, attributes or values); send smaller batches`,
      );
    }
  }

  /** Counts one more span of the request against DecodeLimits.maxSpans (decoders call it as they meet each span). */
  countSpan(): void {
    const max = this.limits.maxSpans;
    if (++this.spans > max) throw new LimitError(`more than ${max} spans in one request; the limit is ${max}`);
  }

  /** Before a span's or resource's own attribute value: it may hold maxValueItems values. */
  startValue(): void {
    this.itemsLeft = this.limits.maxValueItems;
    this.topItems = 0;
  }

  /**
   * Counts one item of an array or key-value list inside such a value (`depth` 1: of the value itself) against
   * maxValueItems; false once past it: the item is skipped, not decoded.
   */
  admitItem(depth: number): boolean {
    if (depth === 1) this.topItems++;
    return --this.itemsLeft >= 0;
  }

  /** After that value, stored in `map` under `key`: reports the map cut when the value held more than it could. */
  endValue(map: AttrMap, key: string, value: AttrValue): void {
    // The first cut of a map is the one reported.
    if (this.itemsLeft < 0 && !this.cut.has(map)) this.cut.set(map, valueCut(key, value, this.topItems, this.limits.maxValueItems));
    this.itemsLeft = Infinity;
  }

  /** Reports `map` cut to `kept` of its `count` attributes. */
  cutAttributes(map: AttrMap, count: number, kept: number): void {
    this.cut.set(map, { field: 'attribute_count', reason: `${count} attributes, more than the limit of ${kept}` });
  }
}

function valueCut(key: string, value: AttrValue, topItems: number, max: number): Cut {
  const what = Array.isArray(value)
    ? topItems > max
      ? `an array of ${topItems} items, more than the limit of ${max} values`
      : `an array holding more than the limit of ${max} values (nested ones counted)`
    : topItems > max
      ? `a key-value list of ${topItems} entries, more than the limit of ${max} values`
      : `a key-value list holding more than the limit of ${max} values (nested ones counted)`;
  return { field: 'attribute_length', reason: `${clipText(key)}: ${what}` };
}
