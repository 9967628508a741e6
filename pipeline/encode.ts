import { LifecycleKeySet, type LifecycleKeyTuple } from './records.ts';
import type { SpanRow } from './rows.ts';

/**
 * The `spans` columns holdscope writes, in the order of the TabSeparated lines below. `ingested_at` is left to
 * its DEFAULT. Rows are inserted as pre-serialized TabSeparated text rather than JSON objects: the client's
 * per-row JSON encoding was the insert path's hot spot, and TSV is several times cheaper to produce and parse.
 */
export const SPAN_COLUMNS = [
  'cluster',
  'request_id',
  'generation',
  'name',
  'trace_id',
  'span_id',
  'start_time',
  'end_time',
  'engine_id',
  'engine_role',
  'engine_version',
  'backend',
  'capacity_slots',
  'rank',
  'chunk_index',
  'pages',
  'slots',
  'admission_outcome',
  'admission_reason',
  'transfer_status',
  'transfer_bytes',
  'decode_engine_id',
  'expected_ranks',
  'hold_timeout_ms',
  'chunks_dropped',
  'inflight',
  'failed_sends',
  'ack_withheld',
  'ack_generation',
  'ack_accepted',
  'missing_ranks',
  'timeout_action',
  'release_reason',
  'checksum_outcome',
  'cancel_targets',
  // Migration 0012: resource labels, '' (the column's DEFAULT) for engines in no experiment.
  'experiment_arm',
  'experiment_run',
] as const;

/**
 * Settings the INSERT needs: an empty field takes the column's DEFAULT (rank and chunk_index are -1 when a span
 * has none), exactly as a field missing from a JSON object did.
 */
export const TSV_INSERT_SETTINGS = { input_format_tsv_empty_as_default: 1 } as const;

const NEEDS_ESCAPE = /[\\\t\n\r]/;
const ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', "'": "\\'" };
const escapeField = (s: string) => (NEEDS_ESCAPE.test(s) ? s.replace(/[\\\t\n\r]/g, (c) => ESCAPES[c] as string) : s);
const quoteElement = (s: string) => `'${s.replace(/[\\\t\n\r']/g, (c) => ESCAPES[c] as string)}'`;

function field(value: string | number | number[] | string[] | undefined): string {
  if (value === undefined) return '';
  if (typeof value === 'string') return escapeField(value);
  if (typeof value === 'number') return String(value);
  if (value.length === 0) return '[]';
  return typeof value[0] === 'string' ? `[${(value as string[]).map(quoteElement).join(',')}]` : `[${value.join(',')}]`;
}

/** One row as a TabSeparated line (with its newline) in SPAN_COLUMNS order. Span text is escaped, never trusted. */
export function encodeSpanLine(row: SpanRow): string {
  let line = field(row.cluster);
  for (let i = 1; i < SPAN_COLUMNS.length; i++) line += '\t' + field(row[SPAN_COLUMNS[i] as string]);
  return line + '\n';
}

const ARRAY_COLUMNS = new Set<string>(['pages', 'expected_ranks', 'missing_ranks', 'cancel_targets']);
const UNESCAPES: Record<string, string> = { t: '\t', n: '\n', r: '\r', '\\': '\\' };

/**
 * A line of `encodeSpanLine` read back, column by column: scalar fields unescaped, arrays as their text. For rows
 * ClickHouse refused (dead letters), whose fields are not to be trusted to parse as their types.
 */
export function spanLineFields(line: string): Record<string, string> {
  const fields = line.replace(/\n$/, '').split('\t');
  const columns: Record<string, string> = {};
  for (const [i, column] of SPAN_COLUMNS.entries()) {
    const text = fields[i] ?? '';
    columns[column] = ARRAY_COLUMNS.has(column) ? text : text.replace(/\\(.)/g, (_, c: string) => UNESCAPES[c] ?? c);
  }
  return columns;
}

interface RowsForInsert {
  rows: number;
  /** The lifecycles the rows belong to, each once. */
  keys: LifecycleKeyTuple[];
}

/** Rows as TabSeparated text (each line with its newline): rows built from SpanRow objects, and the dead-letter path. */
export interface TsvRows extends RowsForInsert {
  format: 'TabSeparated';
  text: string;
}

/** Rows as one Native block (pipeline/native.ts): what the pipeline inserts. */
export interface NativeRows extends RowsForInsert {
  format: 'Native';
  block: Buffer;
}

/** Rows ready for one INSERT: their encoding, how many they are, and the lifecycles they belong to. */
export type EncodedRows = TsvRows | NativeRows;

/** How rows go to ClickHouse: Native where the connection sends bytes, TabSeparated text to embedded ClickHouse. */
export type RowEncoding = EncodedRows['format'];

/** The bytes rows take until ClickHouse has them (what a consumer's in-flight bound counts). */
export const encodedBytes = (rows: EncodedRows): number => (rows.format === 'Native' ? rows.block.length : Buffer.byteLength(rows.text));

/**
 * Collects rows into TsvRows. The lines are joined once at the end: a string grown with `+=` stays a V8 rope
 * (one heap object per piece, about 4.7 heap bytes per character measured on the collector's spans, against 1.0
 * flat) for as long as nothing reads it whole, and rows waiting for ClickHouse held that way ran out of a 192 MiB heap.
 */
export class TsvRowsBuilder {
  private readonly lines: string[] = [];
  private readonly keys = new LifecycleKeySet();

  add(row: SpanRow): void {
    this.lines.push(encodeSpanLine(row));
    this.keys.add(row.cluster, row.request_id, row.generation);
  }

  build(): TsvRows {
    return { format: 'TabSeparated', text: this.lines.join(''), rows: this.lines.length, keys: this.keys.values() };
  }
}

export function encodeRows(rows: Iterable<SpanRow>): TsvRows {
  const builder = new TsvRowsBuilder();
  for (const row of rows) builder.add(row);
  return builder.build();
}
