/**
 * An INSERT never fails on the number of partitions it touches: one OTLP request whose 150 spans fall on 150 days
 * (within a retention of a year) goes through the collector's triage and the pipeline's decoding into one INSERT,
 * and every span, the lifecycles' records and their hold minutes are stored. With ClickHouse's default of at most
 * 100 partitions per insert block, the same rows fail with TOO_MANY_PARTS (code 252), which the writer took for a
 * busy server and retried for ever; so would the record refresh's INSERT ... SELECT of 150 lifecycles of 150 days
 * (lifecycle_records is partitioned by its bucket's day).
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { triage } from '../../collector/messages.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { Attr, MESSAGE_HEADERS, ResourceAttr, spanTimeWindow, type OtlpSpan } from '../../contract/index.ts';
import { rowsOf } from '../../pipeline/ingest.ts';
import { createPipelineMetrics, migrate, SPAN_COLUMNS, SpanWriter, TSV_INSERT_SETTINGS } from '../../pipeline/index.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const DAYS = 150;
const RETENTION_DAYS = 365;
const DAY_MS = 86_400_000;

type Row = Record<string, unknown>;

describe('one request spanning 150 days', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  const rows = async (query: string, database: string, params: Record<string, unknown> = {}): Promise<Row[]> =>
    (await client.query({ query, query_params: { db: database, ...params }, format: 'JSONEachRow' })).json<Row>();
  const nowMs = Date.now();
  /** Noon of the day `day` days back (0: yesterday): a day, and so a partition, of its own. */
  const noon = (day: number) => Math.floor(nowMs / DAY_MS) * DAY_MS - DAY_MS / 2 - day * DAY_MS;
  const iso = (ms: number) => new Date(ms).toISOString().replace('T', ' ').replace('Z', '000000');

  /** A hold of `requestId` at noon of each of the last 150 days, page `day` held on day `day`. */
  function holdsOnDays(requestIdOf: (day: number) => string): OtlpSpan[] {
    return Array.from({ length: DAYS }, (_, day) => {
      const ns = BigInt(noon(day)) * 1_000_000n;
      return {
        traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
        spanId: (day + 1).toString(16).padStart(16, '0'),
        parentSpanId: '',
        name: 'pd.hold',
        kind: 1,
        startTimeUnixNano: ns,
        endTimeUnixNano: ns,
        attributes: {
          [Attr.requestId]: requestIdOf(day),
          [Attr.generation]: 0,
          [Attr.holdExpectedRanks]: [0],
          [Attr.holdTimeoutMs]: 30_000,
          [Attr.kvSlots]: 16,
          [Attr.kvPages]: [day],
        },
        statusCode: 0,
        statusMessage: '',
      };
    });
  }

  /**
   * One OTLP request of `spans` through the collector's triage (a year's retention), the pipeline's decoding of its
   * messages, and one writer's INSERT and record refresh, into a new database: the database.
   */
  async function store(spans: OtlpSpan[]): Promise<string> {
    const database = randomDatabase('partitions');
    await migrate(client, { database, retentionDays: RETENTION_DAYS });
    const resource = {
      [ResourceAttr.role]: 'decode',
      [ResourceAttr.engineId]: 'decode-0',
      [ResourceAttr.engineVersion]: 'v1',
      [ResourceAttr.transferBackend]: 'mooncake',
      [ResourceAttr.kvCapacitySlots]: 4096,
    };
    const request = { resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 'test', version: '1' }, spans }] }] };
    const triaged = triage(
      request,
      { maxAttributeLength: 4096, maxClockSkewMs: 3_600_000, retentionDays: RETENTION_DAYS },
      new Date(nowMs),
    );
    assert.deepEqual(triaged.rejections, []);
    const metrics = createPipelineMetrics();
    const encoded = rowsOf(
      triaged.messages.map((m) => ({ value: m.value, headers: MESSAGE_HEADERS })),
      'TabSeparated', // embedded ClickHouse's
      metrics,
      quietLog,
      spanTimeWindow(nowMs, 3_600_000, RETENTION_DAYS),
    );
    assert.equal(encoded.rows, DAYS, 'one batch of every span');

    // The control: ClickHouse's default limit refuses these rows in one INSERT.
    await assert.rejects(
      client.insert({
        table: `${database}.spans`,
        values: Readable.from([encoded.text], { objectMode: false }),
        format: 'TabSeparated',
        columns: [...SPAN_COLUMNS],
        clickhouse_settings: { ...TSV_INSERT_SETTINGS, max_partitions_per_insert_block: '100' },
      }),
      (err: Error & { code?: string }) => err.code === '252' && /Too many partitions/.test(err.message),
    );

    const writer = new SpanWriter({
      client,
      database,
      maxBatchRows: 10_000,
      lingerMs: 1,
      retry: { initialMs: 50, maxMs: 100 },
      metrics,
      log: quietLog,
    });
    let timer: NodeJS.Timeout | undefined;
    try {
      // A failing INSERT or refresh is retried for ever: give up after a while, saying so.
      const stored = await Promise.race([
        writer.write(encoded).then(() => true),
        new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), 60_000))),
      ]);
      const failures = (await metrics.insertFailures.get()).values.reduce((n, v) => n + v.value, 0);
      assert.ok(stored, `not stored within 60 s (${failures} failed INSERTs or refreshes)`);
      assert.equal(failures, 0);
    } finally {
      clearTimeout(timer);
      await writer.shutdown();
    }
    const [partitions] = await rows(
      "SELECT uniqExact(partition) AS n FROM system.parts WHERE database = {db:String} AND table = 'spans' AND active",
      database,
    );
    assert.equal(partitions?.n, DAYS);
    return database;
  }

  it('of one lifecycle: every span, its record and its hold minutes are stored and read back', async () => {
    const database = await store(holdsOnDays(() => 'r-many-days'));
    const [spans] = await rows(
      'SELECT count() AS spans, uniqExact(toYYYYMMDD(start_time)) AS days, toString(min(start_time)) AS first, toString(max(start_time)) AS last, ' +
        "arraySort(groupArray(pages[1])) AS pages FROM {db:Identifier}.spans WHERE request_id = 'r-many-days'",
      database,
    );
    assert.deepEqual(spans, {
      spans: DAYS,
      days: DAYS,
      first: iso(noon(DAYS - 1)),
      last: iso(noon(0)),
      pages: Array.from({ length: DAYS }, (_, day) => day),
    });
    // The lifecycle's state and record, computed by the refresh that followed the INSERT, hold every day's span.
    const states = await rows(
      "SELECT toString(first_seen) AS first_seen, toString(last_seen) AS last_seen, length(holds) AS holds FROM {db:Identifier}.lifecycle_states FINAL WHERE request_id = 'r-many-days'",
      database,
    );
    assert.deepEqual(states, [{ first_seen: iso(noon(DAYS - 1)), last_seen: iso(noon(0)), holds: DAYS }]);
    const [records] = await rows(
      "SELECT count() AS n FROM {db:Identifier}.lifecycle_records FINAL WHERE request_id = 'r-many-days' AND is_deleted = 0",
      database,
    );
    assert.equal(records?.n, 1);
    const [minutes] = await rows("SELECT count() AS n FROM {db:Identifier}.hold_minutes FINAL WHERE cluster = 'default'", database);
    assert.ok(Number(minutes?.n) >= 1, 'the hold minutes were computed');
  });

  it("of 150 lifecycles, one a day: every span and every record (a refresh writing 150 days' partitions) are stored and read back", async () => {
    const database = await store(holdsOnDays((day) => `r-day-${day}`));
    const spans = await rows(
      'SELECT request_id, toString(start_time) AS start FROM {db:Identifier}.spans ORDER BY start_time DESC',
      database,
    );
    assert.deepEqual(
      spans,
      Array.from({ length: DAYS }, (_, day) => ({ request_id: `r-day-${day}`, start: iso(noon(day)) })),
    );
    const records = await rows(
      'SELECT request_id, toString(hold_start) AS hold_start FROM {db:Identifier}.lifecycle_records FINAL WHERE is_deleted = 0 ORDER BY hold_start DESC',
      database,
    );
    assert.deepEqual(
      records,
      Array.from({ length: DAYS }, (_, day) => ({ request_id: `r-day-${day}`, hold_start: iso(noon(day)) })),
    );
    const [recordPartitions] = await rows(
      "SELECT uniqExact(partition) AS n FROM system.parts WHERE database = {db:String} AND table = 'lifecycle_records' AND active",
      database,
    );
    assert.equal(recordPartitions?.n, DAYS);
    const [minutes] = await rows("SELECT count() AS n FROM {db:Identifier}.hold_minutes FINAL WHERE cluster = 'default'", database);
    assert.equal(minutes?.n, DAYS, 'a hold minute a day');
  });
});
