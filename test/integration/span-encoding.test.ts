/**
 * The pipeline inserts Native blocks, and TabSeparated text where it has rows rather than spans (the dead-letter
 * path, tests). The rows ClickHouse stores from either must be exactly the rows it stored from JSON objects (the
 * client's own encoding), for hostile text too: span attributes are untrusted and may hold tabs, newlines, quotes and
 * backslashes.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import {
  encodeRows,
  migrate,
  NativeRowsBuilder,
  nativeSpanInsert,
  spanRow,
  SPAN_COLUMNS,
  TSV_INSERT_SETTINGS,
  type SpanRow,
} from '../../pipeline/index.ts';
import { HOSTILE_TEXT, pdEventsOfEveryKind } from '../support/pd-events.ts';
import { NO_OWN_COLUMNS } from '../../pipeline/rows.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from '../support/clickhouse-server.ts';

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

const read = async (client: ClickHouseClient, db: string, table = 'spans', order = 'span_id') =>
  (await client.query({ query: `SELECT * EXCEPT ingested_at FROM ${db}.${table} ORDER BY ${order}`, format: 'JSONEachRow' })).json<
    Record<string, unknown>
  >();

const insertTsv = (client: ClickHouseClient, db: string, text: string) =>
  client.insert({
    table: `${db}.spans`,
    values: Readable.from([text], { objectMode: false }),
    format: 'TabSeparated',
    columns: [...SPAN_COLUMNS],
    clickhouse_settings: TSV_INSERT_SETTINGS,
  });

describe('TabSeparated span encoding (embedded ClickHouse)', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
    await migrate(client, { database: 'via_json', retentionDays: 30 });
    await migrate(client, { database: 'via_tsv', retentionDays: 30 });
    await migrate(client, { database: 'via_defaults', retentionDays: 30 });
  });

  it("writes the table's DEFAULT for each column a span does not carry, as ClickHouse fills it", async () => {
    const handoff = pdEventsOfEveryKind('d', 0).find((e) => e.name === 'pd.handoff');
    assert.ok(handoff, 'a span that carries none of its own columns');
    const common = Object.fromEntries(Object.entries(spanRow(handoff)).filter(([column]) => !(column in NO_OWN_COLUMNS)));
    await client.insert({ table: 'via_defaults.spans', values: [common], format: 'JSONEachRow' });
    const [stored] = await read(client, 'via_defaults');
    // UInt64 comes back as a JSON string.
    const defaults = Object.keys(NO_OWN_COLUMNS).map((c) => [c, c === 'transfer_bytes' ? Number(stored?.[c]) : stored?.[c]]);
    assert.deepEqual(Object.fromEntries(defaults), NO_OWN_COLUMNS);
  });
  after(() => client?.close());

  it('stores exactly what the JSON encoding stores, hostile text included', async () => {
    const input = rows();
    await client.insert({ table: 'via_json.spans', values: input, format: 'JSONEachRow' });
    const encoded = encodeRows(input);
    assert.equal(encoded.rows, input.length);
    await insertTsv(client, 'via_tsv', encoded.text);
    const [viaJson, viaTsv] = [await read(client, 'via_json'), await read(client, 'via_tsv')];
    assert.equal(viaJson.length, input.length);
    assert.deepEqual(viaTsv, viaJson);
    // And the text survived verbatim (not merely the same mangling twice).
    const cancel = viaTsv.filter((r) => r.name === 'pd.cancel').map((r) => (r.cancel_targets as string[])[0]);
    assert.deepEqual(cancel.sort(), [...HOSTILE].sort());
    assert.ok(viaTsv.filter((r) => r.name === 'pd.cancel').every((r) => r.rank === -1 && r.chunk_index === -1));
  });
});

// Embedded ClickHouse cannot take a binary body (common/clickhouse.ts: insertsBinaryBodies): a server's HTTP interface.
describe('Native span encoding (ClickHouse server)', () => {
  let server: ClickHouseServer;
  let client: ClickHouseClient;
  before(async () => {
    server = await startClickHouseServer();
    client = clickhouseClient(server.url);
    await migrate(client, { database: 'via_native', retentionDays: 30 });
    await migrate(client, { database: 'via_tsv_events', retentionDays: 30 });
  });
  after(async () => {
    await client?.close();
    await server?.stop();
  });

  it('Native blocks store what TabSeparated stores, for every kind of span, lifecycles included', async () => {
    const events = HOSTILE_TEXT.flatMap(pdEventsOfEveryKind);
    // Two blocks in one INSERT, as the writer sends several batches.
    const blocks = [events.slice(0, 40), events.slice(40)].map((part) => {
      const builder = new NativeRowsBuilder();
      for (const e of part) builder.add(e);
      return builder.build().block;
    });
    const result = await client.exec({ query: nativeSpanInsert('via_native'), values: Readable.from(blocks, { objectMode: false }) });
    for await (const _ of result.stream); // read to the end
    await insertTsv(client, 'via_tsv_events', encodeRows(events.map(spanRow)).text);
    const [viaNative, viaTsv] = [await read(client, 'via_native'), await read(client, 'via_tsv_events')];
    assert.equal(viaNative.length, events.length);
    assert.deepEqual(viaNative, viaTsv);
    const states = 'cluster, request_id, generation';
    assert.deepEqual(
      await read(client, 'via_native', 'lifecycle_states FINAL', states),
      await read(client, 'via_tsv_events', 'lifecycle_states FINAL', states),
    );
    const admissions = viaNative.filter((r) => r.name === 'pd.admission').map((r) => r.admission_reason);
    assert.deepEqual(admissions.sort(), [...HOSTILE_TEXT].sort(), 'the text verbatim');
  });
});
