import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HOSTILE_TEXT, pdEventsOfEveryKind } from '../support/pd-events.ts';
import { encodeSpanLine } from '../../pipeline/encode.ts';
import { NativeRowsBuilder } from '../../pipeline/native.ts';
import { nativeSpanLines } from '../../pipeline/native-read.ts';
import { spanRow } from '../../pipeline/rows.ts';

describe('Native span blocks', () => {
  it('hold, value for value and in column order, the rows the TabSeparated path writes', () => {
    const all = HOSTILE_TEXT.flatMap(pdEventsOfEveryKind);
    const builder = new NativeRowsBuilder();
    for (const e of all) builder.add(e);
    const rows = builder.build();
    assert.equal(rows.rows, all.length);
    assert.equal(rows.keys.length, HOSTILE_TEXT.length, 'one lifecycle key per request');
    assert.deepEqual(
      nativeSpanLines(rows.block),
      all.map((e) => encodeSpanLine(spanRow(e))),
    );
  });

  it('read back in order when several blocks follow each other, as one INSERT sends them', () => {
    const blocks = HOSTILE_TEXT.slice(0, 3).map((text, i) => {
      const builder = new NativeRowsBuilder();
      for (const e of pdEventsOfEveryKind(text, i)) builder.add(e);
      return builder.build().block;
    });
    const expected = HOSTILE_TEXT.slice(0, 3).flatMap((text, i) => pdEventsOfEveryKind(text, i).map((e) => encodeSpanLine(spanRow(e))));
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
