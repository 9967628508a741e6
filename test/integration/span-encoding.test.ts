/**
 * The pipeline inserts pre-serialized TabSeparated text. The rows ClickHouse stores from it must be exactly the
 * rows it stored from JSON objects (the client's own encoding), for hostile text too: span attributes are
 * untrusted and may hold tabs, newlines, quotes and backslashes.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { encodeRows, migrate, SPAN_COLUMNS, TSV_INSERT_SETTINGS, type SpanRow } from '../../pipeline/index.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const HOSTILE = [
  "a'b",
  'tab\there',
  'new\nline',
  'cr\rhere',
  'back\\slash',
  "\\'",
  '\\t literally',
  '',
  'ünïcødé ✓',
  '<script>alert(1)</script>',
  '\\N',
  'NULL',
];

function rows(): SpanRow[] {
  const out: SpanRow[] = [];
  HOSTILE.forEach((text, i) => {
    const common = {
      cluster: `c-${text}`,
      request_id: `r${i}-${text}`,
      generation: i,
      trace_id: `t${i}`,
      start_time: '2026-12-02 10:00:00.000000001',
      end_time: '2026-12-02 10:00:01.123456789',
      engine_id: `e-${text}`,
      engine_role: 'decode',
      engine_version: text,
      backend: 'mooncake',
      capacity_slots: 4096,
    };
    // Columns a span does not carry take their defaults (rank and chunk_index are -1).
    out.push({ ...common, name: 'pd.cancel', span_id: `s${i}a`, cancel_targets: [text, `${text}2`, ''] });
    out.push({
      ...common,
      name: 'pd.transfer',
      span_id: `s${i}b`,
      rank: 1,
      chunk_index: i,
      pages: [1, 2, 4_000_000_000],
      transfer_status: 'ok',
      transfer_bytes: 2 ** 40,
      decode_engine_id: text,
    });
    out.push({ ...common, name: 'pd.admission', span_id: `s${i}c`, admission_outcome: 'rejected', admission_reason: text });
    out.push({ ...common, name: 'pd.hold', span_id: `s${i}d`, expected_ranks: [], hold_timeout_ms: 30_000, slots: 3, pages: [] });
  });
  return out;
}

describe('TabSeparated span encoding', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
    await migrate(client, { database: 'via_json', retentionDays: 30 });
    await migrate(client, { database: 'via_tsv', retentionDays: 30 });
  });
  after(() => client?.close());

  it('stores exactly what the JSON encoding stores, hostile text included', async () => {
    const input = rows();
    await client.insert({ table: 'via_json.spans', values: input, format: 'JSONEachRow' });
    const encoded = encodeRows(input);
    assert.equal(encoded.rows, input.length);
    await client.insert({
      table: 'via_tsv.spans',
      values: Readable.from([encoded.text], { objectMode: false }),
      format: 'TabSeparated',
      columns: [...SPAN_COLUMNS],
      clickhouse_settings: TSV_INSERT_SETTINGS,
    });
    const read = async (db: string) =>
      (await client.query({ query: `SELECT * EXCEPT ingested_at FROM ${db}.spans ORDER BY span_id`, format: 'JSONEachRow' })).json<
        Record<string, unknown>
      >();
    const [viaJson, viaTsv] = [await read('via_json'), await read('via_tsv')];
    assert.equal(viaJson.length, input.length);
    assert.deepEqual(viaTsv, viaJson);
    // And the text survived verbatim (not merely the same mangling twice).
    const cancel = viaTsv.filter((r) => r.name === 'pd.cancel').map((r) => (r.cancel_targets as string[])[0]);
    assert.deepEqual(cancel.sort(), [...HOSTILE].sort());
    assert.ok(viaTsv.filter((r) => r.name === 'pd.cancel').every((r) => r.rank === -1 && r.chunk_index === -1));
  });
});
