/**
 * The stored lifecycle records (migration 0003) that the window queries read must equal the `lifecycles` view they
 * are computed from: after a whole scenario, after spans arrive out of order across a bucket boundary (the record
 * moves to an earlier bucket and its old row is deleted), after replays, and after a backfill of a database whose
 * records were never computed (an upgrade). The flagged records (migration 0004) must equal the records that carry a
 * flag, and the held records (migration 0006) those that have a hold, likewise; the late writes' pages (migration
 * 0008) must be every write of the spans that completed after its lifecycle's release, and the page allocations
 * (migration 0009) the allocation of every record that has one.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { createPipelineMetrics, createWriter, encodeRows, migrate, SpanWriter, type SpanRow } from '../../pipeline/index.ts';
import { runQuery } from '../../queries/index.ts';
import { clickhouseClient, startClickHouseServer } from '../support/clickhouse-server.ts';
import { loadScenario } from '../support/load.ts';
import { quietLog, randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

type Row = Record<string, unknown>;

async function rows(client: ClickHouseClient, query: string, database: string): Promise<Row[]> {
  return (await client.query({ query, query_params: { db: database }, format: 'JSONEachRow' })).json<Row>();
}

const viewRecords = (client: ClickHouseClient, database: string) =>
  rows(client, 'SELECT * FROM {db:Identifier}.lifecycles ORDER BY cluster, request_id, generation', database);
/** The newest live row of every lifecycle in one of the record tables, as the view's columns. */
const stored = (table: string) => (client: ClickHouseClient, database: string) =>
  rows(
    client,
    `SELECT * EXCEPT (bucket, computed_at, is_deleted) FROM {db:Identifier}.${table} FINAL ORDER BY cluster, request_id, generation`,
    database,
  );
const storedRecords = stored('lifecycle_records');
const storedFlagged = stored('lifecycle_flags');
const storedHeld = stored('lifecycle_holds');

/** Every successful write that completed after its lifecycle's release, found in the spans through the view. */
const viewLateWrites = (client: ClickHouseClient, database: string) =>
  rows(
    client,
    'SELECT DISTINCT s.cluster AS cluster, s.request_id AS request_id, s.generation AS generation, s.span_id AS span_id, s.rank AS rank, ' +
      's.chunk_index AS chunk_index, toString(s.end_time) AS landed_at, toString(s.decode_engine_id) AS decode_engine, s.pages AS pages ' +
      'FROM {db:Identifier}.spans AS s INNER JOIN {db:Identifier}.lifecycles AS l ' +
      'ON s.cluster = l.cluster AND s.request_id = l.request_id AND s.generation = l.generation ' +
      "WHERE s.name = 'pd.transfer' AND s.transfer_status = 'ok' AND l.release_at IS NOT NULL AND s.end_time > l.release_at " +
      'ORDER BY cluster, request_id, generation, span_id',
    database,
  );
/** The late writes' pages stored (migration 0008); a capture repeated is the same row. */
const storedLateWrites = (client: ClickHouseClient, database: string) =>
  rows(
    client,
    'SELECT DISTINCT cluster, request_id, generation, span_id, rank, chunk_index, toString(landed_at) AS landed_at, decode_engine, pages ' +
      'FROM {db:Identifier}.late_write_pages ORDER BY cluster, request_id, generation, span_id',
    database,
  );

/** Every lifecycle's allocation, as the view computes it, and as stored (migration 0009). */
const allocationColumns =
  'cluster, request_id, generation, decode_engine, toString(allocated_at) AS allocated_at, toString(release_at) AS release_at, kv_pages';
const viewAllocations = (client: ClickHouseClient, database: string) =>
  rows(
    client,
    `SELECT ${allocationColumns} FROM {db:Identifier}.lifecycles WHERE allocated_at IS NOT NULL ORDER BY cluster, request_id, generation`,
    database,
  );
const storedAllocations = (client: ClickHouseClient, database: string) =>
  rows(
    client,
    `SELECT ${allocationColumns} FROM {db:Identifier}.page_allocations FINAL ORDER BY cluster, request_id, generation`,
    database,
  );

/**
 * The hold minutes (migration 0010) as stored, their groups and tails spread to one row each, and the same computed from
 * the view: a path of their own (the view merges the states on read), so a minute the refreshes missed or left stale
 * shows as a difference.
 */
const minuteOf = "toString(toStartOfMinute(assumeNotNull(hold_start)), 'UTC')";
const prefillVersions = "arrayFilter(v -> v != '', arrayDistinct(arrayMap(p -> p.2, prefill_engines)))";
async function storedHoldMinutes(client: ClickHouseClient, database: string): Promise<Row[][]> {
  const spread = (array: string, fields: string) =>
    rows(
      client,
      `SELECT cluster, toString(minute, 'UTC') AS minute, ${fields} FROM {db:Identifier}.hold_minutes FINAL ARRAY JOIN ${array} AS x ORDER BY ALL`,
      database,
    );
  return Promise.all([
    spread(
      'resolution_groups',
      'x.resolution AS resolution, x.decode_engine AS decode_engine, x.backend AS backend, x.decode_version AS decode_version, x.prefill_versions AS prefill_versions, toUInt64(x.holds) AS holds',
    ),
    spread('tails', 'x.prefill_engine AS prefill_engine, x.backend AS backend, x.tail_ms AS tail_ms, x.hold_timeout_ms AS hold_timeout_ms'),
  ]);
}
async function viewHoldMinutes(client: ClickHouseClient, database: string): Promise<Row[][]> {
  return Promise.all([
    rows(
      client,
      `SELECT cluster, ${minuteOf} AS minute, resolution, decode_engine, backend, decode_version, ${prefillVersions} AS prefill_versions, count() AS holds ` +
        'FROM {db:Identifier}.lifecycles WHERE hold_start IS NOT NULL GROUP BY ALL ORDER BY ALL',
      database,
    ),
    rows(
      client,
      `SELECT cluster, ${minuteOf} AS minute, p.1 AS prefill_engine, backend, assumeNotNull(transfer_tail_ms) AS tail_ms, hold_timeout_ms ` +
        'FROM {db:Identifier}.lifecycles ARRAY JOIN prefill_engines AS p WHERE transfer_tail_ms IS NOT NULL ORDER BY ALL',
      database,
    ),
  ]);
}

/** Takes a table computed from the records (migration 0004's, 0006's, 0008's or 0009's) and its view away, as in a database from before it. */
async function dropRecordCopy(
  client: ClickHouseClient,
  database: string,
  table: 'lifecycle_flags' | 'lifecycle_holds' | 'late_write_pages' | 'page_allocations',
): Promise<void> {
  await client.command({ query: `DROP VIEW {db:Identifier}.${table}_mv`, query_params: { db: database } });
  await client.command({ query: `DROP TABLE {db:Identifier}.${table}`, query_params: { db: database } });
}

/** The records of lifecycles with a hold. */
const held = (records: Row[]) => records.filter((r) => r.hold_start !== null);

/** The records that carry a flag a lifecycle keeps once raised (all but open_hold), as flags.ts names them. */
const flagged = (records: Row[]) =>
  records.filter(
    (r) =>
      Number(r.late_writes) > 0 ||
      r.unsafe_release === true ||
      Number(r.acks_after_failed_send) > 0 ||
      Number(r.stale_acks_accepted) > 0 ||
      (r.admission_outcome === 'rejected' && (Number(r.chunks_launched) > 0 || r.handoff_at !== null)) ||
      r.checksum_outcome === 'mismatch',
  );

function span(over: Partial<SpanRow> & Pick<SpanRow, 'name' | 'span_id' | 'start_time'>): SpanRow {
  return {
    cluster: 'c1',
    request_id: 'room-x',
    generation: 0,
    trace_id: 't1',
    end_time: over.start_time,
    engine_id: 'decode-0',
    engine_role: 'decode',
    engine_version: 'v1',
    backend: 'mooncake',
    capacity_slots: 4096,
    ...over,
  };
}

/** A hold of one slot set, at the same time for every request: a lifecycle of its own per request id. */
const heldSpan = (i: number, requestId = `room-${i}`) =>
  span({
    name: 'pd.hold',
    span_id: `h${i}`,
    request_id: requestId,
    start_time: '2026-12-02 11:00:00.000000000',
    hold_timeout_ms: 30_000,
    slots: 4,
  });

/** How many observations a histogram has. */
const observations = async (histogram: { get(): Promise<{ values: { metricName?: string; value: number }[] }> }) =>
  (await histogram.get()).values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;

/** Whether `work` settles within `ms` (a writer that waits out a long interval would not). */
async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work.then(() => true), new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

describe('stored lifecycle records', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  /** A writer on a fresh database with short retries; `over` sets the batching and refresh options a test is about. */
  async function writerOnNewDatabase(over: { maxBatchRows?: number; refreshIntervalMs?: number } = {}) {
    const database = randomDatabase('records');
    await migrate(client, { database, retentionDays: 30 });
    const metrics = createPipelineMetrics();
    const writer = new SpanWriter({
      client,
      database,
      maxBatchRows: 1000,
      lingerMs: 1,
      retry: { initialMs: 50, maxMs: 100 },
      metrics,
      log: quietLog,
      ...over,
    });
    return { database, metrics, writer };
  }

  it('equal the view, lifecycle by lifecycle, after a mixed scenario, and again after a backfill of an upgraded database', async () => {
    const database = randomDatabase('records');
    // Twenty minutes into an hour, one or two hours ago: the lifecycles' hour and five minutes differ, which the
    // upgrade from hour buckets below needs (a scenario in the first five minutes of an hour would give it none).
    const startTimeMs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000 + 20 * 60_000;
    const run = await loadScenario(
      client,
      database,
      'mixed',
      5,
      (c) => {
        c.requests = 600;
        // One decode engine releases on a 300 ms timeout while more transfers than usual have long tails: late writes.
        (c.decode[0] as { holdTimeoutMs: number }).holdTimeoutMs = 300;
        c.transfer.tailProbability = 0.3;
      },
      startTimeMs,
    );
    const view = await viewRecords(client, database);
    assert.ok(view.length > 600, `${view.length} lifecycles`);
    assert.deepEqual(await storedRecords(client, database), view);
    const flaggedView = flagged(view);
    assert.ok(
      flaggedView.length > 20 && flaggedView.length < view.length / 2,
      `${flaggedView.length} of ${view.length} lifecycles flagged`,
    );
    assert.deepEqual(await storedFlagged(client, database), flaggedView);
    const heldView = held(view);
    assert.ok(heldView.length > 20 && heldView.length < view.length, `${heldView.length} of ${view.length} lifecycles held`);
    assert.deepEqual(await storedHeld(client, database), heldView);
    const holdMinutes = await viewHoldMinutes(client, database);
    assert.ok((holdMinutes[0] as Row[]).length > 5 && (holdMinutes[1] as Row[]).length > 20, 'groups and tails to compare');
    assert.deepEqual(await storedHoldMinutes(client, database), holdMinutes);
    const lateWrites = await viewLateWrites(client, database);
    assert.equal(
      lateWrites.length,
      view.reduce((n, r) => n + Number(r.late_writes), 0),
      'one late write per write the records count',
    );
    assert.ok(lateWrites.length > 5, `${lateWrites.length} late writes`);
    assert.deepEqual(await storedLateWrites(client, database), lateWrites);
    const allocations = await viewAllocations(client, database);
    assert.ok(allocations.length > 600, `${allocations.length} allocations`);
    assert.deepEqual(await storedAllocations(client, database), allocations);

    // A database from before migration 0010: no hold minutes. Migrating computes them from the held records.
    await client.command({ query: 'DROP TABLE {db:Identifier}.hold_minutes', query_params: { db: database } });
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 10 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, ['0010_hold_minutes']);
    assert.deepEqual(await storedHoldMinutes(client, database), holdMinutes);

    // A database from before migration 0009: no page allocations. Migrating stores those of the stored records.
    await dropRecordCopy(client, database, 'page_allocations');
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 9 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, ['0009_page_allocations']);
    assert.deepEqual(await storedAllocations(client, database), allocations);

    // A database from before migration 0008: no late writes' pages. Migrating stores those of the flagged records.
    await dropRecordCopy(client, database, 'late_write_pages');
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 8 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, ['0008_late_write_pages']);
    assert.deepEqual(await storedLateWrites(client, database), lateWrites);

    // A database from before migration 0003: lifecycle states, no records. Migrating backfills them.
    await client.command({ query: 'TRUNCATE TABLE {db:Identifier}.lifecycle_records', query_params: { db: database } });
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 3 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual(await storedRecords(client, database), []);
    const { applied } = await migrate(client, { database, retentionDays: 30 });
    assert.deepEqual(applied, ['0003_lifecycle_records']);
    assert.deepEqual(await storedRecords(client, database), view);
    assert.deepEqual(await storedFlagged(client, database), flaggedView);
    assert.deepEqual(await storedHeld(client, database), heldView);
    assert.deepEqual(await storedHoldMinutes(client, database), holdMinutes);

    // A database from before migration 0004: records, no flagged table. Migrating computes the records again, and
    // the materialized view fills it.
    await dropRecordCopy(client, database, 'lifecycle_flags');
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 4 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, ['0004_lifecycle_flags']);
    assert.deepEqual(await storedFlagged(client, database), flaggedView);

    // A database from before migration 0005 (so before 0006 too): records in hour buckets, as 0003 stored them.
    // Migrating moves every record to the five minutes of its first span, with no row left in an hour bucket.
    await dropRecordCopy(client, database, 'lifecycle_holds');
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version IN (5, 6) SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    await client.command({
      query:
        'INSERT INTO {db:Identifier}.lifecycle_records SELECT * REPLACE (toStartOfHour(first_seen) AS bucket) ' +
        'FROM (SELECT * FROM {db:Identifier}.lifecycle_records FINAL WHERE toStartOfHour(first_seen) != bucket)',
      query_params: { db: database },
    });
    assert.notDeepEqual(await storedRecords(client, database), view, 'the hour-bucketed copies are live rows beside the others');
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, [
      '0005_five_minute_buckets',
      '0006_lifecycle_holds',
    ]);
    assert.deepEqual(await storedRecords(client, database), view);
    assert.deepEqual(await storedFlagged(client, database), flaggedView);
    assert.deepEqual(await storedHeld(client, database), heldView);
    assert.deepEqual(await storedLateWrites(client, database), lateWrites);
    assert.deepEqual(await storedAllocations(client, database), allocations);
    const misplaced = await rows(
      client,
      'SELECT count() AS n FROM {db:Identifier}.lifecycle_records FINAL WHERE bucket != toStartOfFiveMinutes(first_seen)',
      database,
    );
    assert.equal(Number(misplaced[0]?.n), 0);

    // A database from before migration 0006: records, no held table. Migrating computes the records again, and the
    // materialized view fills it.
    await dropRecordCopy(client, database, 'lifecycle_holds');
    await client.command({
      query: 'ALTER TABLE {db:Identifier}.schema_migrations DELETE WHERE version = 6 SETTINGS mutations_sync = 1',
      query_params: { db: database },
    });
    assert.deepEqual((await migrate(client, { database, retentionDays: 30 })).applied, ['0006_lifecycle_holds']);
    assert.deepEqual(await storedHeld(client, database), heldView);

    // The window queries that read the stored records agree with the ground truth.
    const window = { from: new Date(run.startTimeMs - 60_000).toISOString(), to: new Date(Date.now() + 60_000).toISOString() };
    const holds = run.truth.filter((t) => t.hold_start_ms !== null);
    const mix = await runQuery(client, database, 'resolution_mix', { ...window, bucket_seconds: '86400' });
    const sum = (key: string) => mix.reduce((n, r) => n + Number(r[key]), 0);
    assert.deepEqual(
      { holds: sum('holds'), drained: sum('drained'), timeouts: sum('timeouts'), open: sum('open') },
      {
        holds: holds.length,
        drained: holds.filter((t) => t.resolution === 'drained').length,
        timeouts: holds.filter((t) => t.resolution === 'timeout').length,
        open: holds.filter((t) => t.resolution === 'open').length,
      },
    );
    const released = holds.filter((t) => t.hold_ms !== null).sort((a, b) => (b.hold_ms as number) - (a.hold_ms as number));
    const longest = await runQuery(client, database, 'longest_holds', { ...window, limit: '5' });
    assert.equal(longest.length, 5);
    // Open holds count up to now, so they lead; every released hold listed is among the truth's longest.
    const listed = longest.filter((r) => r.resolution !== 'open');
    for (const r of listed)
      assert.ok(
        Math.abs(
          Number(r.held_ms) - (released.find((t) => t.request_id === r.request_id && t.generation === r.generation)?.hold_ms ?? NaN),
        ) < 0.01,
        `${String(r.request_id)}`,
      );
    if (listed.length > 0) assert.ok(Math.abs(Number(listed[0]?.held_ms) - (released[0]?.hold_ms as number)) < 0.01);
    const stale = await runQuery(client, database, 'stale_acks_by_engine', window);
    assert.deepEqual(
      {
        accepted: stale.reduce((n, r) => n + Number(r.stale_acks_accepted), 0),
        rejected: stale.reduce((n, r) => n + Number(r.stale_acks_rejected), 0),
      },
      {
        accepted: run.truth.reduce((n, t) => n + t.stale_acks.accepted, 0),
        rejected: run.truth.reduce((n, t) => n + t.stale_acks.rejected, 0),
      },
    );
    const open = await runQuery(client, database, 'open_holds', window);
    assert.equal(
      open.reduce((n, r) => n + Number(r.open), 0),
      holds.filter((t) => t.resolution === 'open').length,
    );
  });

  it('move to an earlier bucket when an earlier span arrives late, leaving one live row, and replays change nothing', async () => {
    const database = randomDatabase('records');
    await migrate(client, { database, retentionDays: 30 });
    const writer = createWriter(client, { database, maxBatchRows: 1000, lingerMs: 1 }, createPipelineMetrics(), quietLog);
    const hour = Date.UTC(2026, 11, 2, 11) * 1e6; // ns
    const at = (deltaMs: number) => {
      const ns = BigInt(hour) + BigInt(deltaMs) * 1_000_000n;
      const iso = new Date(Number(ns / 1_000_000n)).toISOString().replace('T', ' ').replace('Z', '');
      return `${iso}000000`;
    };
    const late = [
      span({
        name: 'pd.hold',
        span_id: 'h',
        start_time: at(20_000),
        expected_ranks: [0],
        hold_timeout_ms: 30_000,
        slots: 16,
        pages: [1, 2],
      }),
      span({ name: 'pd.release', span_id: 'r', start_time: at(25_000), release_reason: 'drained', pages: [1, 2] }),
      // A write that lands after the release: the lifecycle is flagged (late_write), so its flagged row moves too.
      span({
        name: 'pd.transfer',
        span_id: 't',
        start_time: at(22_000),
        end_time: at(26_000),
        transfer_status: 'ok',
        rank: 0,
        chunk_index: 0,
        pages: [1, 2],
      }),
    ];
    // The allocation, 30 s before the hour, reaches ClickHouse after the hold and release.
    const early = [span({ name: 'pd.kv.alloc', span_id: 'a', start_time: at(-30_000), slots: 16, pages: [1, 2] })];
    await writer.write(encodeRows(late));
    let stored = await rows(
      client,
      'SELECT toString(bucket) AS bucket, resolution, toString(allocated_at) AS allocated_at FROM {db:Identifier}.lifecycle_records FINAL',
      database,
    );
    assert.deepEqual(
      stored.map((r) => [r.bucket, r.resolution, r.allocated_at]),
      [['2026-12-02 11:00:00', 'drained', null]],
    );
    assert.deepEqual(await storedFlagged(client, database), await storedRecords(client, database));
    assert.deepEqual(await storedHeld(client, database), await storedRecords(client, database));

    await writer.write(encodeRows(early));
    for (let replay = 0; replay < 2; replay++) {
      stored = await rows(
        client,
        'SELECT toString(bucket) AS bucket, resolution, toString(allocated_at) AS allocated_at FROM {db:Identifier}.lifecycle_records FINAL',
        database,
      );
      assert.deepEqual(
        stored.map((r) => [r.bucket, r.resolution, r.allocated_at]),
        [['2026-12-02 10:55:00', 'drained', '2026-12-02 10:59:30.000000000']],
      );
      assert.deepEqual(await storedRecords(client, database), await viewRecords(client, database));
      const flaggedRows = await rows(
        client,
        'SELECT toString(bucket) AS bucket, late_writes FROM {db:Identifier}.lifecycle_flags FINAL',
        database,
      );
      assert.deepEqual(
        flaggedRows.map((r) => [r.bucket, r.late_writes]),
        [['2026-12-02 10:55:00', 1]],
      );
      const heldRows = await rows(
        client,
        'SELECT toString(bucket) AS bucket, toString(allocated_at) AS allocated_at FROM {db:Identifier}.lifecycle_holds FINAL',
        database,
      );
      assert.deepEqual(
        heldRows.map((r) => [r.bucket, r.allocated_at]),
        [['2026-12-02 10:55:00', '2026-12-02 10:59:30.000000000']],
      );
      assert.deepEqual(
        (await storedLateWrites(client, database)).map((r) => [r.span_id, r.landed_at, r.pages]),
        [['t', '2026-12-02 11:00:26.000000000', [1, 2]]],
      );
      assert.deepEqual(await storedAllocations(client, database), await viewAllocations(client, database));
      assert.equal((await storedAllocations(client, database)).length, 1);
      await writer.write(encodeRows([...late, ...early]));
    }
    // A window starting after the hour still finds the lifecycle (its spans reach into it), through the stored row.
    const longest = await runQuery(client, database, 'longest_holds', { from: '2026-12-02 11:00:10', to: '2026-12-02 11:01:00' });
    assert.deepEqual(
      longest.map((r) => [r.request_id, r.held_ms, r.resolution]),
      [['room-x', 5000, 'drained']],
    );
    await writer.shutdown();
  });

  it('keep the hold minutes current as a hold moves to an earlier minute, is released and replayed', async () => {
    const { database, writer } = await writerOnNewDatabase();
    const at = (ms: number) => `${new Date(Date.UTC(2026, 11, 2, 11) + ms).toISOString().replace('T', ' ').replace('Z', '')}000000`;
    const minutes = async () =>
      (
        await rows(
          client,
          "SELECT toString(minute, 'UTC') AS minute, arraySum(g -> g.holds, resolution_groups) AS holds, arraySum(arrayMap(g -> g.holds * (g.resolution = 'open'), resolution_groups)) AS open FROM {db:Identifier}.hold_minutes FINAL ORDER BY minute",
          database,
        )
      ).map((r) => [r.minute, Number(r.holds), Number(r.open)]);
    // Opened in minute 2, then an earlier hold span of the same lifecycle (minute 1) arrives: minute 2 is left empty.
    await writer.write(
      encodeRows([
        span({
          name: 'pd.hold',
          span_id: 'h2',
          start_time: at(125_000),
          expected_ranks: [0],
          hold_timeout_ms: 30_000,
          slots: 16,
          pages: [1, 2],
        }),
      ]),
    );
    assert.deepEqual(await minutes(), [['2026-12-02 11:02:00', 1, 1]]);
    await writer.write(
      encodeRows([
        span({
          name: 'pd.hold',
          span_id: 'h1',
          start_time: at(65_000),
          expected_ranks: [0],
          hold_timeout_ms: 30_000,
          slots: 16,
          pages: [1, 2],
        }),
      ]),
    );
    assert.deepEqual(await minutes(), [
      ['2026-12-02 11:01:00', 1, 1],
      ['2026-12-02 11:02:00', 0, 0],
    ]);
    // Released two minutes later: the minute it started in has it released, and a replay changes nothing.
    const release = span({ name: 'pd.release', span_id: 'r', start_time: at(190_000), release_reason: 'drained', pages: [1, 2] });
    for (let replay = 0; replay < 2; replay++) {
      await writer.write(encodeRows([release]));
      assert.deepEqual(await minutes(), [
        ['2026-12-02 11:01:00', 1, 0],
        ['2026-12-02 11:02:00', 0, 0],
      ]);
      assert.deepEqual(await storedHoldMinutes(client, database), await viewHoldMinutes(client, database));
    }
    await writer.shutdown();
  });

  it(
    'refresh thousands of lifecycles with long request ids in one write through a ClickHouse server, whose form fields hold ~128 KB',
    { timeout: 120_000 },
    async () => {
      const server = await startClickHouseServer();
      const http = clickhouseClient(server.url);
      try {
        const database = randomDatabase('records');
        await migrate(http, { database, retentionDays: 30 });
        const writer = createWriter(http, { database, maxBatchRows: 100_000, lingerMs: 1 }, createPipelineMetrics(), quietLog);
        // 6,000 lifecycles of 150-character request ids: about 1.8 MB of keys, which must travel in many parameters
        // and several statements, none over the server's limit.
        const spans = Array.from({ length: 6000 }, (_, i) =>
          span({
            name: 'pd.hold',
            span_id: `h${i}`,
            request_id: `room-${String(i).padStart(5, '0')}-${'k'.repeat(140)}`,
            start_time: '2026-12-02 11:00:00.000000000',
            hold_timeout_ms: 30_000,
            slots: 4,
          }),
        );
        await writer.write(encodeRows(spans));
        const stored = await storedRecords(http, database);
        assert.equal(stored.length, 6000);
        assert.deepEqual(stored, await viewRecords(http, database));
        await writer.shutdown();
      } finally {
        await http.close();
        await server.stop();
      }
    },
  );

  it('refresh at most once per interval while rows keep coming: the first batch at once, the batches stored meanwhile in few rounds', async () => {
    const intervalMs = 1000;
    const { database, metrics, writer } = await writerOnNewDatabase({ refreshIntervalMs: intervalMs });
    const started = performance.now();
    await writer.write(encodeRows([heldSpan(0)]));
    const firstMs = performance.now() - started;
    assert.ok(firstMs < intervalMs, `the first batch waited ${Math.round(firstMs)} ms for its records`);
    // A batch every 10 ms for 2.5 s, each its own INSERT: back to back, rounds would follow one another every few
    // tens of ms; spaced, one a second while the stream lasts and one once it is quiet.
    const writes: Promise<void>[] = [];
    let written = 1;
    for (const until = performance.now() + 2500; performance.now() < until; written++) {
      writes.push(writer.write(encodeRows([heldSpan(written)])));
      await new Promise((r) => setTimeout(r, 10));
    }
    await Promise.all(writes);
    const rounds = await observations(metrics.refreshSeconds);
    assert.ok(rounds >= 2 && rounds <= 5, `${rounds} refresh rounds for ${written} batches over 2.5 s at one a second`);
    const stored = await storedRecords(client, database);
    assert.equal(stored.length, written);
    assert.deepEqual(stored, await viewRecords(client, database));
    await writer.shutdown();
  });

  it('refresh at once when the stream goes quiet, however long the interval: a consumer at its bound is not held', async () => {
    const { database, metrics, writer } = await writerOnNewDatabase({ refreshIntervalMs: 600_000 });
    try {
      await writer.write(encodeRows([heldSpan(0)]));
      const started = performance.now();
      // Within the interval of the first round: only the quiet after it lets this one start.
      const stored = await settlesWithin(writer.write(encodeRows([heldSpan(1)])), 30_000);
      assert.ok(stored, `the second batch still waited for its records after ${Math.round(performance.now() - started)} ms`);
      assert.equal(await observations(metrics.refreshSeconds), 2);
      assert.deepEqual(await storedRecords(client, database), await viewRecords(client, database));
      assert.equal((await storedRecords(client, database)).length, 2);
    } finally {
      await writer.shutdown();
    }
  });

  it('a round waiting out its interval behind an INSERT under way starts when that INSERT ends and the stream is quiet', async () => {
    const bulkRows = 30_000;
    // A lone row and then a batch too large to share its INSERT: the lone row's round waits while the bulk INSERT
    // runs (hundreds of ms, past the quiet rule's 50), and nothing else would wake it before the interval ends.
    const { database, metrics, writer } = await writerOnNewDatabase({ maxBatchRows: bulkRows, refreshIntervalMs: 600_000 });
    try {
      await writer.write(encodeRows([heldSpan(0)]));
      const started = performance.now();
      const bulk = encodeRows(Array.from({ length: bulkRows }, (_, i) => heldSpan(i + 2, `bulk-${i % 20}`)));
      const stored = await settlesWithin(Promise.all([writer.write(encodeRows([heldSpan(1)])), writer.write(bulk)]), 30_000);
      assert.ok(stored, `the batches still waited for their records after ${Math.round(performance.now() - started)} ms`);
      assert.equal(await observations(metrics.insertSeconds), 3, 'the lone row and the bulk batch were inserted apart');
      assert.deepEqual(await storedRecords(client, database), await viewRecords(client, database));
      assert.equal((await storedRecords(client, database)).length, 22);
    } finally {
      await writer.shutdown();
    }
  });

  it('hold a write until its records are stored: a failing refresh is retried, counted, and the write resolves after it succeeds', async () => {
    const { database, metrics, writer } = await writerOnNewDatabase();
    // The refresh's table is gone (as after a botched manual change): spans still insert, records cannot.
    await client.command({
      query: 'RENAME TABLE {db:Identifier}.lifecycle_records TO {db:Identifier}.lifecycle_records_away',
      query_params: { db: database },
    });
    let resolved = false;
    const written = writer
      .write(
        encodeRows([
          span({ name: 'pd.hold', span_id: 'h', start_time: '2026-12-02 11:00:00.000000000', hold_timeout_ms: 30_000, slots: 4 }),
        ]),
      )
      .then(() => {
        resolved = true;
      });
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(resolved, false, 'the write resolved while its records could not be stored');
    const failures = (await metrics.insertFailures.get()).values.reduce((n, v) => n + v.value, 0);
    assert.ok(failures >= 2, `${failures} failed refreshes counted`);
    assert.equal((await rows(client, 'SELECT count() AS n FROM {db:Identifier}.spans', database))[0]?.n, 1, 'the span itself is stored');
    await client.command({
      query: 'RENAME TABLE {db:Identifier}.lifecycle_records_away TO {db:Identifier}.lifecycle_records',
      query_params: { db: database },
    });
    await written;
    assert.deepEqual(await storedRecords(client, database), await viewRecords(client, database));
    await writer.shutdown();
  });
});
