import type { PdEvent } from '../contract/index.ts';
import { SPAN_COLUMNS, type NativeRows } from './encode.ts';
import { LifecycleKeySet } from './records.ts';
import { fillOwnColumns, NO_OWN_COLUMNS, type OwnColumns } from './rows.ts';

/**
 * ClickHouse's Native format for span rows: a block is its column count and row count (varints), then each column's
 * name, type and values, column after column. The pipeline inserts its rows this way rather than as TabSeparated text
 * because ClickHouse reads typed columns without parsing a character of them (4.6-4.8 µs a span of the server's CPU
 * against 9.0-9.6 for the same rows as text, into a bare copy of `spans`), and writing them costs this process less
 * than escaping and joining text. A stream of blocks is one INSERT; ClickHouse squashes them into one part.
 *
 * LowCardinality columns are sent as plain String: the server converts them on INSERT
 * (input_format_native_allow_types_conversion, on by default), and sending the dictionary encoding buys nothing
 * measurable. Every value the validator lets through fits its column (contract/limits.ts: INT_COLUMNS, MAX_TIME_NS),
 * so a row cannot be refused for its encoding, only for its content (a constraint): see the writer.
 */
export const NATIVE_SPAN_TYPES = {
  cluster: 'String',
  request_id: 'String',
  generation: 'UInt32',
  name: 'String',
  trace_id: 'String',
  span_id: 'String',
  start_time: "DateTime64(9, 'UTC')",
  end_time: "DateTime64(9, 'UTC')",
  engine_id: 'String',
  engine_role: 'String',
  engine_version: 'String',
  backend: 'String',
  capacity_slots: 'UInt32',
  rank: 'Int32',
  chunk_index: 'Int32',
  pages: 'Array(UInt32)',
  slots: 'UInt32',
  admission_outcome: 'String',
  admission_reason: 'String',
  transfer_status: 'String',
  transfer_bytes: 'UInt64',
  decode_engine_id: 'String',
  expected_ranks: 'Array(UInt32)',
  hold_timeout_ms: 'UInt32',
  chunks_dropped: 'UInt32',
  inflight: 'UInt32',
  failed_sends: 'UInt32',
  ack_withheld: 'UInt8',
  ack_generation: 'UInt32',
  ack_accepted: 'UInt8',
  missing_ranks: 'Array(UInt32)',
  timeout_action: 'String',
  release_reason: 'String',
  checksum_outcome: 'String',
  cancel_targets: 'Array(String)',
  experiment_arm: 'String',
  experiment_run: 'String',
} as const satisfies Record<(typeof SPAN_COLUMNS)[number], string>;

export type NativeType = (typeof NATIVE_SPAN_TYPES)[keyof typeof NATIVE_SPAN_TYPES];

/** A column's bytes, grown by doubling: values are written straight into it, never through intermediate strings. */
class Bytes {
  buf = Buffer.allocUnsafe(256);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.length);
    this.buf = grown;
  }

  varint(n: number): void {
    this.reserve(10);
    while (n >= 0x80) {
      this.buf[this.length++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.length++] = n;
  }

  string(s: string): void {
    // 42 UTF-16 units are at most 126 UTF-8 bytes: a one-byte length, written once the bytes are.
    if (s.length <= 42) {
      this.reserve(1 + s.length * 3);
      const n = this.buf.write(s, this.length + 1);
      this.buf[this.length] = n;
      this.length += 1 + n;
      return;
    }
    const n = Buffer.byteLength(s, 'utf8');
    this.varint(n);
    this.reserve(n);
    this.length += this.buf.write(s, this.length);
  }

  u8(n: number): void {
    this.reserve(1);
    this.buf[this.length++] = n;
  }

  u32(n: number): void {
    this.reserve(4);
    this.length = this.buf.writeUInt32LE(n, this.length);
  }

  i32(n: number): void {
    this.reserve(4);
    this.length = this.buf.writeInt32LE(n, this.length);
  }

  u64(n: number): void {
    this.reserve(8);
    this.buf.writeUInt32LE(n % 0x1_0000_0000, this.length);
    this.buf.writeUInt32LE(Math.floor(n / 0x1_0000_0000), this.length + 4);
    this.length += 8;
  }

  i64(n: bigint): void {
    this.reserve(8);
    this.length = this.buf.writeBigInt64LE(n, this.length);
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/** An Array column: each row's end offset (UInt64, cumulative), then every row's elements as one column. */
class ArrayColumn {
  readonly offsets = new Bytes();
  readonly elements = new Bytes();
  private count = 0;

  add(items: readonly number[] | readonly string[], strings: boolean): void {
    for (const item of items) {
      if (strings) this.elements.string(item as string);
      else this.elements.u32(item as number);
    }
    this.count += items.length;
    this.offsets.u64(this.count);
  }
}

/** Collects events into one Native block of SPAN_COLUMNS, in order. */
export class NativeSpanBlock {
  rows = 0;
  /** One object, refilled for each span: an object per row would only be garbage. */
  private readonly own: OwnColumns = { ...NO_OWN_COLUMNS };
  private readonly c = {
    cluster: new Bytes(),
    request_id: new Bytes(),
    generation: new Bytes(),
    name: new Bytes(),
    trace_id: new Bytes(),
    span_id: new Bytes(),
    start_time: new Bytes(),
    end_time: new Bytes(),
    engine_id: new Bytes(),
    engine_role: new Bytes(),
    engine_version: new Bytes(),
    backend: new Bytes(),
    capacity_slots: new Bytes(),
    rank: new Bytes(),
    chunk_index: new Bytes(),
    pages: new ArrayColumn(),
    slots: new Bytes(),
    admission_outcome: new Bytes(),
    admission_reason: new Bytes(),
    transfer_status: new Bytes(),
    transfer_bytes: new Bytes(),
    decode_engine_id: new Bytes(),
    expected_ranks: new ArrayColumn(),
    hold_timeout_ms: new Bytes(),
    chunks_dropped: new Bytes(),
    inflight: new Bytes(),
    failed_sends: new Bytes(),
    ack_withheld: new Bytes(),
    ack_generation: new Bytes(),
    ack_accepted: new Bytes(),
    missing_ranks: new ArrayColumn(),
    timeout_action: new Bytes(),
    release_reason: new Bytes(),
    checksum_outcome: new Bytes(),
    cancel_targets: new ArrayColumn(),
    experiment_arm: new Bytes(),
    experiment_run: new Bytes(),
  } satisfies Record<(typeof SPAN_COLUMNS)[number], Bytes | ArrayColumn>;

  /**
   * Appends one span; a column the span does not carry gets the table's DEFAULT (rank and chunk_index -1, else empty).
   * Each column's write is spelled out, beside its type in NATIVE_SPAN_TYPES, on purpose: a loop over the columns with
   * a writer derived from each type cost 6-8 µs a span against 2-5 (alternating, the bench's workload), on the path
   * whose CPU issue 26 is short of. test/unit/native-blocks.test.ts fails if a write and its column disagree.
   */
  add(e: PdEvent): void {
    const c = this.c;
    c.cluster.string(e.cluster);
    c.request_id.string(e.requestId);
    c.generation.u32(e.generation);
    c.name.string(e.name);
    c.trace_id.string(e.traceId);
    c.span_id.string(e.spanId);
    c.start_time.i64(e.startNs);
    c.end_time.i64(e.endNs);
    c.engine_id.string(e.engine.id);
    c.engine_role.string(e.engine.role);
    c.engine_version.string(e.engine.version);
    c.backend.string(e.engine.backend);
    c.capacity_slots.u32(e.engine.capacitySlots);
    c.experiment_arm.string(e.engine.experimentArm);
    c.experiment_run.string(e.engine.experimentRun);
    const own = fillOwnColumns(e, this.own);
    c.rank.i32(own.rank);
    c.chunk_index.i32(own.chunk_index);
    c.pages.add(own.pages, false);
    c.slots.u32(own.slots);
    c.admission_outcome.string(own.admission_outcome);
    c.admission_reason.string(own.admission_reason);
    c.transfer_status.string(own.transfer_status);
    c.transfer_bytes.u64(own.transfer_bytes);
    c.decode_engine_id.string(own.decode_engine_id);
    c.expected_ranks.add(own.expected_ranks, false);
    c.hold_timeout_ms.u32(own.hold_timeout_ms);
    c.chunks_dropped.u32(own.chunks_dropped);
    c.inflight.u32(own.inflight);
    c.failed_sends.u32(own.failed_sends);
    c.ack_withheld.u8(own.ack_withheld);
    c.ack_generation.u32(own.ack_generation);
    c.ack_accepted.u8(own.ack_accepted);
    c.missing_ranks.add(own.missing_ranks, false);
    c.timeout_action.string(own.timeout_action);
    c.release_reason.string(own.release_reason);
    c.checksum_outcome.string(own.checksum_outcome);
    c.cancel_targets.add(own.cancel_targets, true);
    this.rows++;
  }

  /** The block: its header, then each column's name, type and values. No rows, no bytes: nothing to send. */
  build(): Buffer {
    if (this.rows === 0) return Buffer.alloc(0);
    const head = new Bytes();
    head.varint(SPAN_COLUMNS.length);
    head.varint(this.rows);
    const parts: Buffer[] = [];
    for (const column of SPAN_COLUMNS) {
      head.string(column);
      head.string(NATIVE_SPAN_TYPES[column]);
      parts.push(Buffer.from(head.bytes()));
      head.length = 0;
      const values = this.c[column];
      if (values instanceof ArrayColumn) parts.push(values.offsets.bytes(), values.elements.bytes());
      else parts.push(values.bytes());
    }
    return Buffer.concat(parts);
  }
}

/** The statement that inserts Native blocks of SPAN_COLUMNS into a database's spans (the client's insert() takes no Native). */
export const nativeSpanInsert = (database: string): string => `INSERT INTO ${database}.spans (${SPAN_COLUMNS.join(', ')}) FORMAT Native`;

/** Collects events into NativeRows: one block, and the lifecycles its rows belong to. */
export class NativeRowsBuilder {
  private readonly block = new NativeSpanBlock();
  private readonly keys = new LifecycleKeySet();

  add(e: PdEvent): void {
    this.block.add(e);
    this.keys.add(e.cluster, e.requestId, e.generation);
  }

  build(): NativeRows {
    return { format: 'Native', block: this.block.build(), rows: this.block.rows, keys: this.keys.values() };
  }
}
