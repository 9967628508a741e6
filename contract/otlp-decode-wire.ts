/**
 * The wire primitives of the OTLP protobuf decoder, on protobufjs's Reader. The Reader reads varints, lengths,
 * tags and fixed-width values; a message's end is the Reader's `len` while the message is decoded (see `enter`),
 * so nothing is read past it. What stays ours: strings (bytes that are not UTF-8 are marked, not replaced), ids as
 * hex, exact 64-bit values without a Long per field, and unknown groups (protoc's depth limit).
 */
import { isUtf8 } from 'node:buffer';
import type { Reader as PbReader } from 'protobufjs';
import { Reader } from './otlp-schema.ts';

/** Put in front of a string whose bytes were not UTF-8: a lone surrogate, which no valid text holds. */
const NOT_UNICODE_MARK = '\uDC00';
/**
 * Strings up to this many bytes are first tried as ASCII in JS: attribute keys, ids, names and versions all are, and
 * skipping the UTF-8 check and its subarray for them cut the pipeline's decoding of the bench's spans by about a
 * quarter (7.3 to 5.5 µs a span). Longer text goes to the native check as before (a limit of 256 did no better).
 */
const SHORT_ASCII_BYTES = 64;
/** The protobufjs recursion limit for unknown groups (protoc's default recursion limit). */
const MAX_GROUP_DEPTH = 100;

/** A wire-format failure the decoder finds itself: the body is not protobuf. */
class WireError extends Error {}

/** What protobufjs's Reader throws, as plain Errors, for bytes that are not protobuf. */
const READER_FAILURE = /^(?:invalid (?:varint|tag|length) encoding|invalid wire type \d+ at offset \d+)$/;

/** Why the body is not protobuf, when `err` says so (truncated, or malformed); otherwise undefined. */
export function wireFailure(err: unknown): string | undefined {
  if (err instanceof WireError) return err.message;
  if (err instanceof RangeError && err.message.startsWith('index out of range')) return `truncated or malformed message (${err.message})`;
  if (err instanceof Error && err.constructor === Error && READER_FAILURE.test(err.message)) return err.message;
  return undefined;
}

/** A position in one request body; subclasses walk its messages. */
export class PbWire {
  protected readonly r: PbReader;
  constructor(protected readonly buf: Buffer) {
    this.r = Reader.create(buf);
  }

  /** Bounds the reads to a message that ends at `end`; returns the enclosing message's end, for `leave`. */
  protected enter(end: number): number {
    const outer = this.r.len;
    this.r.len = end;
    return outer;
  }

  protected leave(outer: number): void {
    this.r.len = outer;
  }

  /** Reads a length prefix and returns where the length-delimited field ends; `pos` is at its start. */
  protected delimited(): number {
    const r = this.r;
    const length = r.size();
    if (length > r.len - r.pos) throw new RangeError(`index out of range: ${r.pos} + ${length} > ${r.len}`);
    return r.pos + length;
  }

  protected string(): string {
    const stop = this.delimited();
    const start = this.r.pos;
    this.r.pos = stop;
    if (stop === start) return '';
    const buf = this.buf;
    if (stop - start <= SHORT_ASCII_BYTES) {
      let i = start;
      while (i < stop && (buf[i] as number) < 0x80) i++;
      // ASCII is UTF-8 that Latin-1 decodes alike, and needs neither the check nor the subarray it takes.
      if (i === stop) return buf.toString('latin1', start, stop);
    }
    // Invalid UTF-8 must not be stored as if U+FFFD had been sent: a lone surrogate in front marks the value as not
    // Unicode, which the validator rejects for that span alone (a request is not refused for spans it does not read).
    const text = buf.toString('utf8', start, stop);
    return isUtf8(buf.subarray(start, stop)) ? text : NOT_UNICODE_MARK + text;
  }

  protected hex(): string {
    const stop = this.delimited();
    const start = this.r.pos;
    this.r.pos = stop;
    return stop === start ? '' : this.buf.toString('hex', start, stop);
  }

  /** A fixed64 as an exact bigint, from its two fixed32 halves (Reader.fixed64 would allocate two objects first). */
  protected fixed64(): bigint {
    const lo = this.r.fixed32();
    const hi = this.r.fixed32();
    return hi === 0 ? BigInt(lo) : (BigInt(hi) << 32n) | BigInt(lo);
  }

  /**
   * A 64-bit varint as an int64: a number when it is a safe integer, else an exact bigint. Below 2^28 (four bytes,
   * the usual attribute) it is read as a uint32, which allocates nothing; longer ones through Reader.int64, whose
   * Long holds the exact halves.
   */
  protected int64(): number | bigint {
    const r = this.r;
    const start = r.pos;
    const value = r.uint32();
    return r.pos - start < 5 ? value : this.longInt64(start);
  }

  /** The slow path of `int64`, apart so that the fast one stays small enough to inline. */
  private longInt64(start: number): number | bigint {
    this.r.pos = start;
    const long = this.r.int64();
    return int64FromHalves(long.low >>> 0, long.high);
  }

  /** Skips the field whose tag was just read (unknown, or of an unexpected wire type). */
  protected skip(tag: number, depth = 0): void {
    const field = tag >>> 3;
    if (field === 0) throw new WireError('illegal tag: field number 0');
    const wireType = tag & 7;
    // Reader.skip() would take a varint of any length; uint32 refuses one of more than 10 bytes, as protobuf does.
    if (wireType === 0) this.r.uint32();
    else if (wireType !== 3) this.r.skipType(wireType);
    else {
      if (depth >= MAX_GROUP_DEPTH) throw new WireError('max depth exceeded');
      for (;;) {
        const inner = this.r.tag();
        if ((inner & 7) === 4) {
          if (inner >>> 3 === 0) throw new WireError('illegal tag: field number 0');
          if (inner >>> 3 !== field) throw new WireError('invalid end group tag');
          return;
        }
        this.skip(inner, depth + 1);
      }
    }
  }
}

/** int64 (two's complement halves) -> number when it is a safe integer, else an exact bigint. */
function int64FromHalves(lo: number, hi: number): number | bigint {
  // Outside ±2^53 the sum may round, but only to a value that still fails the safety test.
  const n = (hi | 0) * 4294967296 + lo;
  return Number.isSafeInteger(n) ? n : (BigInt(hi | 0) << 32n) | BigInt(lo);
}
