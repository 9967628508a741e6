import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PdEvent } from '../../contract/index.ts';
import { HOSTILE_TEXT, pdEventsOfEveryKind } from '../support/pd-events.ts';
import { encodeSpanLine, SPAN_COLUMNS } from '../../pipeline/encode.ts';
import { NativeRowsBuilder } from '../../pipeline/native.ts';
import { nativeSpanLines } from '../../pipeline/native-read.ts';
import { spanRow, type SpanRow } from '../../pipeline/rows.ts';

const ARRAYS = new Set(['pages', 'expected_ranks', 'missing_ranks', 'cancel_targets']);
const NUMBERS = new Set(['slots', 'transfer_bytes', 'hold_timeout_ms', 'chunks_dropped', 'inflight', 'failed_sends']);
for (const c of ['ack_withheld', 'ack_generation', 'ack_accepted']) NUMBERS.add(c);

/**
 * A span's TabSeparated line with the table's DEFAULTs written out (migration 0001: rank and chunk_index -1, numbers 0,
 * arrays and strings empty) where TabSeparated leaves a field empty for ClickHouse to fill: a Native block carries every value.
 */
function lineWithDefaults(e: PdEvent): string {
  const row: Record<string, string | number | number[] | string[]> = spanRow(e);
  for (const column of SPAN_COLUMNS)
    row[column] ??= column === 'rank' || column === 'chunk_index' ? -1 : NUMBERS.has(column) ? 0 : ARRAYS.has(column) ? [] : '';
  return encodeSpanLine(row as SpanRow);
}

describe('Native span blocks', () => {
  it('hold, value for value and in column order, the rows the TabSeparated path writes', () => {
    const all = HOSTILE_TEXT.flatMap(pdEventsOfEveryKind);
    const builder = new NativeRowsBuilder();
    for (const e of all) builder.add(e);
    const rows = builder.build();
    assert.equal(rows.rows, all.length);
    assert.equal(rows.keys.length, HOSTILE_TEXT.length, 'one lifecycle key per request');
    assert.deepEqual(nativeSpanLines(rows.block), all.map(lineWithDefaults));
  });

  it('read back in order when several blocks follow each other, as one INSERT sends them', () => {
    const blocks = HOSTILE_TEXT.slice(0, 3).map((text, i) => {
      const builder = new NativeRowsBuilder();
      for (const e of pdEventsOfEveryKind(text, i)) builder.add(e);
      return builder.build().block;
    });
    const expected = HOSTILE_TEXT.slice(0, 3).flatMap((text, i) => pdEventsOfEveryKind(text, i).map(lineWithDefaults));
    assert.deepEqual(nativeSpanLines(Buffer.concat(blocks)), expected);
  });

  it('no rows make no bytes: an empty batch weighs nothing in flight and sends nothing', () => {
    const rows = new NativeRowsBuilder().build();
    assert.deepEqual([rows.rows, rows.block.length, nativeSpanLines(rows.block)], [0, 0, []]);
  });

  it('a block cut short is an error, not fewer rows', () => {
    const builder = new NativeRowsBuilder();
    for (const e of pdEventsOfEveryKind('x', 0)) builder.add(e);
    const block = builder.build().block;
    assert.throws(() => nativeSpanLines(block.subarray(0, block.length - 3)), /cut short/);
  });
});
