/**
 * `holdscope start` without Kafka (the in-process queue), run as a user runs it, on a ClickHouse HTTP server in its
 * own process: a span ClickHouse refuses does not block the senders after it, and SIGTERM during a ClickHouse outage
 * (the writer in its retry loop) exits promptly, refusing what it did not store.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { encodeOtlpProtobuf } from '../../contract/index.ts';
import { clickhouseClient, startClickHouseServer } from '../support/clickhouse-server.ts';
import { holdRequest, holdSpan, nowNs } from '../support/fuzz-otlp.ts';
import { randomDatabase } from '../support/stack.ts';
import { startHoldscope } from '../support/start-process.ts';
import { waitFor } from '../support/truth-check.ts';

/** `holdscope start --no-simulate` on `clickhouseUrl`. */
const start = (clickhouseUrl: string, database: string) =>
  startHoldscope(['--no-simulate'], { CLICKHOUSE_URL: clickhouseUrl, CLICKHOUSE_DATABASE: database });

/** POSTs one OTLP protobuf request of `pd.hold` spans for these request ids; resolves with the status and how long it took. */
async function send(otlpPort: number, requestIds: string[]): Promise<{ status: number; ms: number }> {
  const traceId = randomBytes(16).toString('hex');
  const body = encodeOtlpProtobuf(
    holdRequest(requestIds.map((id, i) => holdSpan(id, randomBytes(8).toString('hex'), traceId, nowNs() + BigInt(i)))),
  );
  const started = performance.now();
  const res = await fetch(`http://127.0.0.1:${otlpPort}/v1/traces`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-protobuf' },
    body,
  });
  await res.arrayBuffer();
  return { status: res.status, ms: performance.now() - started };
}

describe('holdscope start without Kafka, under faults', { timeout: 120_000 }, () => {
  const running: ChildProcess[] = [];
  after(() => {
    for (const child of running) if (child.exitCode === null) child.kill('SIGKILL');
  });

  it('a span ClickHouse refuses is dead-lettered and blocks nobody; SIGTERM during an outage exits promptly', async () => {
    const server = await startClickHouseServer();
    const client = clickhouseClient(server.url);
    const database = randomDatabase('start');
    try {
      const s = await start(server.url, database);
      running.push(s.child);
      // ClickHouse refuses these rows for their content (VIOLATED_CONSTRAINT), whatever the validator lets through.
      await client.command({
        query: "ALTER TABLE {db:Identifier}.spans ADD CONSTRAINT refuse_poison CHECK request_id NOT LIKE 'poison%'",
        query_params: { db: database },
      });

      const mixed = await send(s.otlpPort, ['fine-1', 'poison-1', 'fine-2']);
      assert.equal(mixed.status, 200, s.log().slice(-3000));
      const after = await send(s.otlpPort, ['fine-3']);
      assert.equal(after.status, 200);
      assert.ok(after.ms < 3000, `a valid request after the refused span took ${Math.round(after.ms)} ms`);
      const stored = await client.query({
        query: 'SELECT DISTINCT request_id FROM {db:Identifier}.spans ORDER BY request_id',
        query_params: { db: database },
        format: 'JSONEachRow',
      });
      assert.deepEqual(
        ((await stored.json()) as { request_id: string }[]).map((r) => r.request_id),
        ['fine-1', 'fine-2', 'fine-3'],
      );
      const dead = await client.query({
        query: 'SELECT request_id, error_name FROM {db:Identifier}.span_dead_letters FINAL',
        query_params: { db: database },
        format: 'JSONEachRow',
      });
      assert.deepEqual(await dead.json(), [{ request_id: 'poison-1', error_name: 'VIOLATED_CONSTRAINT' }]);

      // ClickHouse goes away: a request waits on the writer's retries, then SIGTERM.
      await server.kill();
      const waiting = send(s.otlpPort, ['fine-4']);
      await waitFor(
        'the writer retrying',
        async () => /inserting \d+ span rows failed; retrying/.test(s.log()),
        15_000,
        () => s.log().slice(-3000),
      );
      const stopping = performance.now();
      s.child.kill('SIGTERM');
      const exit = await s.exited;
      const stopMs = performance.now() - stopping;
      assert.deepEqual(exit, { code: 0, signal: null }, s.log().slice(-3000));
      assert.ok(stopMs < 8000, `SIGTERM took ${Math.round(stopMs)} ms to exit`);
      assert.equal((await waiting).status, 503, 'the spans not stored are refused, for the sender to retry');
    } finally {
      await client.close();
      await server.stop();
    }
  });
});
