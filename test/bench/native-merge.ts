/**
 * Native blocks of the same columns merged into one, for the ceiling: ClickHouse reads each block's header and
 * column types on their own, which for the few rows of one Kafka message (a lifecycle key's spans) costs more than the
 * rows, while the pipeline sends one block per fetched batch. Merging copies each column's bytes and rebases the Array
 * offsets: no value is decoded or encoded.
 */

const FIXED_WIDTH: Record<string, number> = { UInt8: 1, UInt32: 4, Int32: 4, UInt64: 8, "DateTime64(9, 'UTC')": 8 };

interface Column {
  name: string;
  type: string;
  /** Scalars: the values. Arrays: the elements (the offsets are in `ends`). */
  data: Buffer;
  ends?: number[];
}

class Cursor {
  pos = 0;
  constructor(readonly buf: Buffer) {}
  varint(): number {
    let n = 0;
    for (let scale = 1; ; scale *= 128) {
      const byte = this.buf[this.pos++] as number;
      n += (byte & 0x7f) * scale;
      if (byte < 0x80) return n;
    }
  }
  string(): string {
    const n = this.varint();
    this.pos += n;
    return this.buf.toString('utf8', this.pos - n, this.pos);
  }
  /** Skips `count` values of a scalar type and returns their bytes. */
  values(type: string, count: number): Buffer {
    const start = this.pos;
    const width = FIXED_WIDTH[type];
    if (width !== undefined) this.pos += width * count;
    else if (type === 'String')
      for (let i = 0; i < count; i++) {
        const length = this.varint(); // before the += reads pos
        this.pos += length;
      }
    else throw new Error(`merging Native blocks: no ${type}`);
    return this.buf.subarray(start, this.pos);
  }
}

function columnsOf(block: Buffer): { rows: number; columns: Column[] } {
  const c = new Cursor(block);
  const count = c.varint();
  const rows = c.varint();
  const columns: Column[] = [];
  for (let i = 0; i < count; i++) {
    const name = c.string();
    const type = c.string();
    const element = /^Array\((.+)\)$/.exec(type)?.[1];
    if (!element) {
      columns.push({ name, type, data: c.values(type, rows) });
      continue;
    }
    const ends = Array.from({ length: rows }, () => Number(block.readBigUInt64LE((c.pos += 8) - 8)));
    columns.push({ name, type, ends, data: c.values(element, ends[rows - 1] ?? 0) });
  }
  return { rows, columns };
}

const varint = (n: number): number[] => {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 128)) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return out;
};
const text = (s: string) => Buffer.concat([Buffer.from(varint(Buffer.byteLength(s))), Buffer.from(s)]);

/** One block of every row of `blocks`, in order (all of the same columns). */
export function mergeNativeBlocks(blocks: Buffer[]): Buffer {
  const parsed = blocks.filter((b) => b.length > 0).map(columnsOf);
  const first = parsed[0];
  if (!first) return Buffer.alloc(0);
  const rows = parsed.reduce((n, b) => n + b.rows, 0);
  const parts: Buffer[] = [Buffer.from([...varint(first.columns.length), ...varint(rows)])];
  first.columns.forEach(({ name, type, ends }, i) => {
    parts.push(text(name), text(type));
    if (ends) {
      const offsets = Buffer.allocUnsafe(rows * 8);
      let row = 0;
      let base = 0;
      for (const b of parsed) {
        for (const end of b.columns[i]?.ends ?? []) offsets.writeBigUInt64LE(BigInt(base + end), 8 * row++);
        base += b.columns[i]?.ends?.at(-1) ?? 0;
      }
      parts.push(offsets);
    }
    for (const b of parsed) parts.push((b.columns[i] as Column).data);
  });
  return Buffer.concat(parts);
}
