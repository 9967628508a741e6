/**
 * Attributes of the OTLP protobuf decoder: KeyValue and AnyValue messages into the model, within the
 * {@link DecodeBudget} (values past DecodeLimits.maxValueItems are skipped without being decoded).
 */
import type { AttrMap, AttrValue } from './otlp-model.ts';
import { clipText, DECODE_COST as COST, MAX_ANY_VALUE_DEPTH, type Cut, type DecodeBudget } from './otlp-limits.ts';
import { PbWire } from './otlp-decode-wire.ts';

/** The tag of AnyValue's int_value (field 3, varint). */
const INT_VALUE_TAG = (3 << 3) | 0;

/** A well-formed body the model refuses (too deep); its location is filled in by the caller that knows it. */
export class Bad extends Error {}

/**
 * Semantics follow protobuf (and protobufjs): unknown fields and fields of an unexpected wire type are skipped, a
 * singular message that repeats is merged, a scalar that repeats takes its last value; an AnyValue holds its last member.
 */
export class PbValues extends PbWire {
  readonly cut: Map<AttrMap, Cut>;

  constructor(
    buf: Buffer,
    protected readonly budget: DecodeBudget | undefined,
  ) {
    super(buf);
    this.cut = budget?.cut ?? new Map<AttrMap, Cut>();
  }

  /** A span's or resource's attributes from their KeyValue positions, within DecodeLimits.maxAttributes. */
  protected attributes(keyValues: number[]): AttrMap {
    const map = this.newMap();
    const count = keyValues.length / 2;
    const kept = this.budget ? Math.min(count, this.budget.limits.maxAttributes) : count;
    for (let n = 0; n < kept; n++) {
      this.r.pos = keyValues[2 * n]!;
      this.keyValue(map, keyValues[2 * n + 1]!, 0);
    }
    if (kept < count) this.budget!.cutAttributes(map, count, kept);
    return map;
  }

  protected newMap(): AttrMap {
    this.budget?.charge(COST.map);
    // A null prototype keeps keys such as `__proto__` and `constructor` plain data.
    return Object.create(null) as AttrMap;
  }

  /** One KeyValue into `map`; at depth 0 (a span's or resource's own attribute) within DecodeLimits.maxValueItems. */
  private keyValue(map: AttrMap, end: number, depth: number): void {
    const r = this.r;
    const outer = r.len;
    r.len = end;
    let key = '';
    let value: AttrValue | undefined;
    const top = depth === 0 ? this.budget : undefined;
    top?.startValue();
    try {
      while (r.pos < end) {
        const tag = r.tag();
        if (tag === ((1 << 3) | 2)) key = this.string();
        else if (tag === ((2 << 3) | 2)) {
          const stop = this.delimited();
          value = this.anyValue(stop, depth, value);
        } else this.skip(tag);
      }
    } catch (err) {
      if (err instanceof Bad && depth === 0) throw new Bad(`attributes[${JSON.stringify(clipText(key))}]: ${err.message}`);
      throw err;
    }
    r.len = outer;
    this.budget?.charge(COST.entry + key.length);
    map[key] = value ?? null;
    top?.endValue(map, key, value ?? null);
  }

  /** An AnyValue; `prev` is the value of an earlier AnyValue of the same field, which this one merges into. */
  private anyValue(end: number, depth: number, prev: AttrValue | undefined): AttrValue {
    const r = this.r;
    const outer = r.len;
    r.len = end;
    let out: AttrValue = prev ?? null;
    const budget = this.budget;
    while (r.pos < end) {
      const tag = r.tag();
      switch (tag) {
        case (1 << 3) | 2: {
          const start = r.pos;
          out = this.string();
          budget?.charge(COST.string + r.pos - start);
          break;
        }
        case (2 << 3) | 0:
          out = this.int64() !== 0;
          break;
        case (3 << 3) | 0:
          out = this.int64();
          budget?.charge(typeof out === 'bigint' ? COST.bigint : COST.number);
          break;
        case (4 << 3) | 1:
          out = r.double();
          budget?.charge(COST.number);
          break;
        case (5 << 3) | 2: {
          if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
          const stop = this.delimited();
          out = this.arrayValue(stop, depth + 1, Array.isArray(out) ? out : undefined);
          break;
        }
        case (6 << 3) | 2: {
          if (depth >= MAX_ANY_VALUE_DEPTH) throw new Bad(`values nested deeper than ${MAX_ANY_VALUE_DEPTH} levels`);
          const stop = this.delimited();
          const into = out !== null && typeof out === 'object' && !Array.isArray(out) && !(out instanceof Uint8Array) ? out : undefined;
          out = this.kvlistValue(stop, depth + 1, into);
          break;
        }
        case (7 << 3) | 2: {
          const stop = this.delimited();
          budget?.charge(COST.bytes + stop - r.pos);
          // A copy, so the value neither keeps the whole request body alive nor is a Buffer.
          out = new Uint8Array(stop - r.pos);
          out.set(this.buf.subarray(r.pos, stop));
          r.pos = stop;
          break;
        }
        default:
          this.skip(tag);
      }
    }
    r.len = outer;
    return out;
  }

  private arrayValue(end: number, depth: number, into: AttrValue[] | undefined): AttrValue[] {
    const r = this.r;
    const outer = r.len;
    r.len = end;
    const budget = this.budget;
    if (budget && !into) budget.charge(COST.array);
    const out = into ?? [];
    while (r.pos < end) {
      const tag = r.tag();
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited();
        if (budget) {
          if (!budget.admitItem(depth)) {
            r.pos = stop;
            continue;
          }
          budget.charge(COST.slot);
        }
        const small = this.smallIntValue(r.pos, stop);
        if (small >= 0) {
          budget?.charge(COST.number);
          out.push(small);
          r.pos = stop;
        } else out.push(this.anyValue(stop, depth, undefined));
      } else this.skip(tag);
    }
    r.len = outer;
    return out;
  }

  /**
   * The value of an AnyValue at [start, stop) that is an int_value alone and below 2^28 (a varint of at most 4 bytes),
   * else -1. Page and rank lists are such values, some 40 a span in the bench's workload: read apart from anyValue's
   * general loop, that workload decodes in 4.8 µs a span rather than 5.5. The varint is read here rather than through
   * `int64` (5.2 µs a span that way): no call per item, and its length is known from the item's.
   */
  private smallIntValue(start: number, stop: number): number {
    const buf = this.buf;
    if (buf[start] !== INT_VALUE_TAG || stop - start > 5 || stop - start < 2) return -1;
    let value = 0;
    for (let at = start + 1, shift = 0; at < stop; at++, shift += 7) {
      const byte = buf[at] as number;
      value |= (byte & 0x7f) << shift;
      // Only the varint's last byte, and no other, has no continuation bit.
      if (byte < 0x80 !== (at === stop - 1)) return -1;
    }
    return value;
  }

  private kvlistValue(end: number, depth: number, into: AttrMap | undefined): AttrMap {
    const r = this.r;
    const outer = r.len;
    r.len = end;
    const budget = this.budget;
    const out = into ?? this.newMap();
    while (r.pos < end) {
      const tag = r.tag();
      if (tag === ((1 << 3) | 2)) {
        const stop = this.delimited();
        if (budget && !budget.admitItem(depth)) {
          r.pos = stop; // past the limit: skipped, not decoded
          continue;
        }
        this.keyValue(out, stop, depth);
      } else this.skip(tag);
    }
    r.len = outer;
    return out;
  }
}
