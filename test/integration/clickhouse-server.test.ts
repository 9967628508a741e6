import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { ClickHouseClient } from '@clickhouse/client';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from '../support/clickhouse-server.ts';

const SCRIPT = fileURLToPath(new URL('../../scripts/chdb-server.mjs', import.meta.url));
const DB = 'holdscope_test';

function rssMiB(pid: number): string {
  const kib = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return kib ? `${(Number(kib) / 1024).toFixed(0)} MiB` : 'unknown';
}

async function rows<T>(client: ClickHouseClient, query: string, query_params?: Record<string, unknown>): Promise<T[]> {
  const result = await client.query({ query, format: 'JSONEachRow', query_params });
  return result.json<T>();
}

async function count(client: ClickHouseClient, table: string, final = false): Promise<number> {
  const [row] = await rows<{ n: number }>(client, `SELECT count() AS n FROM ${table}${final ? ' FINAL' : ''}`);
  return row?.n ?? -1;
}

function eventRows(from: number, n: number): { id: number; name: string; ts: string; value: number }[] {
  return Array.from({ length: n }, (_, i) => ({
    id: from + i,
    name: `event-${from + i}`,
    ts: new Date(Date.UTC(2026, 0, 1) + (from + i) * 1000).toISOString(),
    value: (from + i) * 0.5,
  }));
}

describe('ClickHouse HTTP server from chdb (scripts/chdb-server.mjs)', { timeout: 60_000 }, () => {
  let server: ClickHouseServer;
  let client: ClickHouseClient;
  let readyMs = 0;

  before(async () => {
    const started = performance.now();
    server = await startClickHouseServer();
    readyMs = performance.now() - started;
    client = clickhouseClient(server.url);
  });

  after(async () => {
    await client?.close();
    await server?.stop();
  });

  it('answers SELECT version() through @clickhouse/client', async (t) => {
    const [row] = await rows<{ v: string }>(client, 'SELECT version() AS v');
    assert.ok(row?.v.startsWith('26.'), `version ${row?.v}`);
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    t.diagnostic(`ClickHouse ${row?.v}: ready in ${readyMs.toFixed(0)} ms (spawn to ready line), RSS ${rssMiB(server.pid)} at ready`);
  });

  it('creates a database and a MergeTree table and counts 10,000 rows inserted as JSONEachRow', async (t) => {
    await client.command({ query: `CREATE DATABASE IF NOT EXISTS ${DB}` });
    await client.command({
      query: `CREATE TABLE ${DB}.events (id UInt64, name String, ts DateTime64(3, 'UTC'), value Float64)
              ENGINE = MergeTree ORDER BY id`,
    });
    const started = performance.now();
    await client.insert({ table: `${DB}.events`, values: eventRows(0, 10_000), format: 'JSONEachRow' });
    const insertMs = performance.now() - started;
    assert.equal(await count(client, `${DB}.events`), 10_000);
    const [sum] = await rows<{ s: number; last: string }>(client, `SELECT sum(id) AS s, toString(max(ts)) AS last FROM ${DB}.events`);
    assert.equal(sum?.s, (9_999 * 10_000) / 2);
    assert.equal(sum?.last, '2026-01-01 02:46:39.000');
    t.diagnostic(`10,000-row JSONEachRow insert took ${insertMs.toFixed(0)} ms; server RSS ${rssMiB(server.pid)}`);
  });

  it('binds query parameters', async () => {
    const [row] = await rows<{ y: number }>(client, 'SELECT {x:UInt32} + 1 AS y', { x: 41 });
    assert.equal(row?.y, 42);
    const [named] = await rows<{ n: number }>(client, `SELECT count() AS n FROM ${DB}.events WHERE name = {name:String}`, {
      name: 'event-7',
    });
    assert.equal(named?.n, 1);
  });

  it('takes two concurrent inserts into the same table', async () => {
    await client.command({
      query: `CREATE TABLE ${DB}.concurrent (id UInt64, name String, ts DateTime64(3, 'UTC'), value Float64) ENGINE = MergeTree ORDER BY id`,
    });
    await Promise.all([
      client.insert({ table: `${DB}.concurrent`, values: eventRows(0, 5_000), format: 'JSONEachRow' }),
      client.insert({ table: `${DB}.concurrent`, values: eventRows(5_000, 5_000), format: 'JSONEachRow' }),
    ]);
    assert.equal(await count(client, `${DB}.concurrent`), 10_000);
  });

  it('deduplicates a ReplacingMergeTree with FINAL', async () => {
    await client.command({
      query: `CREATE TABLE ${DB}.latest (id UInt64, version UInt32, state String) ENGINE = ReplacingMergeTree(version) ORDER BY id`,
    });
    await client.insert({
      table: `${DB}.latest`,
      values: [
        { id: 1, version: 1, state: 'old' },
        { id: 2, version: 1, state: 'only' },
      ],
      format: 'JSONEachRow',
    });
    await client.insert({ table: `${DB}.latest`, values: [{ id: 1, version: 2, state: 'new' }], format: 'JSONEachRow' });
    assert.equal(await count(client, `${DB}.latest`), 3, 'two parts, not merged yet');
    assert.equal(await count(client, `${DB}.latest`, true), 2);
    const got = await rows<{ id: number; state: string }>(client, `SELECT id, state FROM ${DB}.latest FINAL ORDER BY id`);
    assert.deepEqual(got, [
      { id: 1, state: 'new' },
      { id: 2, state: 'only' },
    ]);
  });

  // ClickHouse notices a client that went away only while it writes to it: with cancel_http_readonly_queries_on_client_close
  // alone a running SELECT goes on until it ends; with send_progress_in_http_headers too it is cancelled at once.
  it('keeps serving after a client disconnects mid-query (and cancels that query when asked to)', async () => {
    const controller = new AbortController();
    const queryId = `disconnect-${Date.now()}`;
    const long = client.query({
      query: 'SELECT count() FROM numbers_mt(1000000000000)',
      query_id: queryId,
      abort_signal: controller.signal,
      clickhouse_settings: { cancel_http_readonly_queries_on_client_close: 1, send_progress_in_http_headers: 1, max_execution_time: 10 },
    });
    const seen = await waitFor(
      async () =>
        (await rows<{ n: number }>(client, `SELECT count() AS n FROM system.processes WHERE query_id = {id:String}`, { id: queryId }))[0]
          ?.n === 1,
      5_000,
    );
    assert.ok(seen, 'the long query showed up in system.processes');
    controller.abort();
    await assert.rejects(long);
    const gone = await waitFor(
      async () =>
        (await rows<{ n: number }>(client, `SELECT count() AS n FROM system.processes WHERE query_id = {id:String}`, { id: queryId }))[0]
          ?.n === 0,
      5_000,
    );
    assert.ok(gone, 'the server cancelled the query of the client that went away');
    assert.equal(await count(client, `${DB}.events`), 10_000);
  });

  it('refuses a second server on the same data path (Code 76 lock) or port, at once', async () => {
    const started = performance.now();
    await assert.rejects(startClickHouseServer({ path: server.path }), (err: Error) => {
      assert.match(err.message, /data directory .* is locked by another ClickHouse process \(PID \d+/);
      assert.match(err.message, /Code: 76/);
      return true;
    });
    const otherPath = await mkdtemp(join(tmpdir(), 'holdscope-clickhouse-other-'));
    await assert.rejects(startClickHouseServer({ path: otherPath, port: server.port }), /port \d+ on 127\.0\.0\.1 is already in use/);
    await rm(otherPath, { recursive: true, force: true });
    // Without the script's own checks, ClickHouse reports the lock itself and the script gives up at once.
    const raw = await runScript(['--path', server.path, '--no-precheck']);
    assert.equal(raw.code, 1);
    assert.match(
      raw.stderr,
      /Code: 76\. DB::Exception: Cannot lock file .*status\. Another server instance in same directory is already running/,
    );
    assert.ok(performance.now() - started < 10_000, 'failed fast rather than hanging');
    assert.equal(await count(client, `${DB}.events`), 10_000, 'the first server is unaffected');
  });

  it('kill() (SIGKILL) makes queries fail with a connection error', async () => {
    await server.kill();
    assert.deepEqual(server.lastExit, { code: null, signal: 'SIGKILL' });
    await assert.rejects(client.query({ query: 'SELECT 1' }), (err: NodeJS.ErrnoException) => {
      assert.match(`${err.code} ${err.message}`, /ECONNREFUSED|ECONNRESET|socket hang up/);
      return true;
    });
  });

  it('restart() brings it back on the same port with the data still on disk', async (t) => {
    const oldPid = server.pid;
    const started = performance.now();
    await server.restart();
    const restartMs = performance.now() - started;
    assert.notEqual(server.pid, oldPid);
    assert.equal(server.url, `http://127.0.0.1:${server.port}`);
    assert.equal(await count(client, `${DB}.events`), 10_000);
    assert.equal(await count(client, `${DB}.concurrent`), 10_000);
    assert.equal(await count(client, `${DB}.latest`, true), 2);
    t.diagnostic(`restart after SIGKILL: ready in ${restartMs.toFixed(0)} ms, RSS ${rssMiB(server.pid)}`);
  });

  it('stop() exits cleanly', async () => {
    const started = performance.now();
    await server.stop();
    assert.deepEqual(server.lastExit, { code: 0, signal: null });
    assert.ok(performance.now() - started < 4_000, 'stopped on SIGTERM, no SIGKILL needed');
    await assert.rejects(client.query({ query: 'SELECT 1' }));
    await server.stop(); // idempotent
  });
});

async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

function runScript(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SCRIPT, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}
