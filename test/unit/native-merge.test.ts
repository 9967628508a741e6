import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SPAN_COLUMNS } from '../../pipeline/encode.ts';
import { NativeRowsBuilder } from '../../pipeline/native.ts';
import { nativeSpanLines } from '../../pipeline/native-read.ts';
import { mergeNativeBlocks } from '../bench/native-merge.ts';
import { HOSTILE_TEXT, pdEventsOfEveryKind } from '../support/pd-events.ts';

describe("the bench ceiling's merge of Native blocks", () => {
  it('holds every row of the blocks, in order, in one block', () => {
    const blocks = HOSTILE_TEXT.map((text, i) => {
      const builder = new NativeRowsBuilder();
      for (const e of pdEventsOfEveryKind(text, i)) builder.add(e);
      return builder.build().block;
    });
    const merged = mergeNativeBlocks(blocks);
    const rows = nativeSpanLines(Buffer.concat(blocks)).length;
    assert.ok(rows < 128, 'a row count of one varint byte');
    assert.deepEqual([merged[0], merged[1]], [SPAN_COLUMNS.length, rows], "one block's header: its columns, then every row");
    assert.deepEqual(nativeSpanLines(merged), nativeSpanLines(Buffer.concat(blocks)));
  });
});
