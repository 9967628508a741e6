import { encodeSpanLine } from './encode.ts';
import { NATIVE_SPAN_TYPES, type NativeType } from './native.ts';
import { formatNanos, type SpanRow } from './rows.ts';

/** Reads what NativeSpanBlock writes, for the rare path that needs rows back (ClickHouse refused a block). */
class Reader {
  private pos = 0;
  constructor(private readonly buf: Buffer) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): number {
    let n = 0;
    let scale = 1;
    for (;;) {
      const byte = this.buf[this.pos++];
      if (byte === undefined) throw new Error('Native block: cut short');
      n += (byte & 0x7f) * scale;
      if (byte < 0x80) return n;
      scale *= 128;
    }
  }

  string(): string {
    const n = this.varint();
    const s = this.buf.toString('utf8', this.pos, this.pos + n);
    this.pos += n;
    return s;
  }

  /** `rows` values of a column of `type`, as a SpanRow holds them. */
  column(type: NativeType, rows: number): (string | number | number[] | string[])[] {
    const scalar = (read: () => string | number) => Array.from({ length: rows }, read);
    const b = this.buf;
    const at = (size: number) => {
      const p = this.pos;
      this.pos += size;
      if (this.pos > b.length) throw new Error('Native block: cut short');
      return p;
    };
    switch (type) {
      case 'String':
        return scalar(() => this.string());
      case 'UInt8':
        return scalar(() => b.readUInt8(at(1)));
      case 'UInt32':
        return scalar(() => b.readUInt32LE(at(4)));
      case 'Int32':
        return scalar(() => b.readInt32LE(at(4)));
      case 'UInt64':
        return scalar(() => Number(b.readBigUInt64LE(at(8))));
      case "DateTime64(9, 'UTC')":
        return scalar(() => formatNanos(b.readBigInt64LE(at(8))));
      case 'Array(UInt32)':
      case 'Array(String)': {
        const ends = Array.from({ length: rows }, () => Number(b.readBigUInt64LE(at(8))));
        let start = 0;
        return ends.map((end) => {
          const items = Array.from({ length: end - start }, () => (type === 'Array(String)' ? this.string() : b.readUInt32LE(at(4))));
          start = end;
          return items as number[] | string[];
        });
      }
    }
  }
}

/** The rows of Native blocks as TabSeparated lines (encodeSpanLine), in order. */
export function nativeSpanLines(blocks: Buffer): string[] {
  const reader = new Reader(blocks);
  const lines: string[] = [];
  while (!reader.done) {
    const columns = reader.varint();
    const count = reader.varint();
    const rows = Array.from({ length: count }, () => ({}) as SpanRow);
    for (let c = 0; c < columns; c++) {
      const name = reader.string();
      const type = reader.string();
      if (!Object.values(NATIVE_SPAN_TYPES).includes(type as NativeType)) throw new Error(`Native block: type ${type} of ${name}`);
      reader.column(type as NativeType, count).forEach((value, i) => ((rows[i] as SpanRow)[name] = value));
    }
    for (const row of rows) lines.push(encodeSpanLine(row));
  }
  return lines;
}
