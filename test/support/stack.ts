import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import { clickHouseFailureKind, createLogger, type ClickHouseClient } from '../../common/index.ts';
import { migrate, Pipeline, pipelineConfigSchema } from '../../pipeline/index.ts';
import type { LifecycleTruth } from '../../emitter/index.ts';
import { MAX_LOOKUP_REQUEST_IDS } from '../../dashboards/index.ts';
import { formatStringListText } from '../../queries/index.ts';
import { randomTopic, type KafkaMock } from './kafka-mock.ts';

export const quietLog = createLogger('test', process.env.HOLDSCOPE_TEST_LOG ?? 'silent');

export const randomDatabase = (prefix = 'hs') => `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;

/** A collector and a pipeline on a fresh topic and database, over the given Kafka and ClickHouse. */
export async function startStack(
  mock: KafkaMock,
  client: ClickHouseClient,
  over: { partitions?: number; topic?: string; database?: string } = {},
) {
  const topic = over.topic ?? randomTopic('spans');
  const database = over.database ?? randomDatabase();
  await mock.createTopic(topic, over.partitions ?? 6).catch(() => undefined);
  await migrate(client, { database, retentionDays: 30 });
  const collector = new Collector(
    collectorConfigSchema.parse({
      port: 0,
      host: '127.0.0.1',
      kafkaBrokers: mock.brokers.join(','),
      topic,
      deadLetterTopic: `${topic}-dlq`,
    }),
    { log: quietLog },
  );
  const port = await collector.start();
  const pipeline = new Pipeline(
    pipelineConfigSchema.parse({
      kafkaBrokers: mock.brokers.join(','),
      topics: topic,
      groupId: `g-${topic}`,
      database,
      lingerMs: 50,
      sessionTimeoutMs: 6000,
      heartbeatIntervalMs: 1000,
    }),
    { log: quietLog, client },
  );
  await pipeline.start();
  return {
    topic,
    database,
    collectorUrl: `http://127.0.0.1:${port}`,
    collector,
    pipeline,
    async stop() {
      await collector.shutdown();
      await pipeline.shutdown().catch(() => undefined);
    },
  };
}

/** Waits until ClickHouse holds `expected` distinct spans in `database`. */
export async function waitForSpans(client: ClickHouseClient, database: string, expected: number, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let have = -1;
  let lastFailure: Error | undefined;
  while (Date.now() < deadline) {
    try {
      const result = await client.query({
        query: `SELECT count() AS n FROM (SELECT DISTINCT trace_id, span_id FROM ${database}.spans)`,
        format: 'JSONEachRow',
      });
      have = Number(((await result.json()) as { n: number }[])[0]?.n ?? 0);
      lastFailure = undefined;
      if (have >= expected) return;
    } catch (error) {
      // A transient failure (no server answer, as a cluster node that had just had a replica back gave once: "socket
      // hang up"; or a busy server) is a "not yet", as the pipeline's retries take it; a refusal ends the wait at once.
      if (clickHouseFailureKind(error) !== 'transient') throw error;
      lastFailure = error as Error;
    }
    await sleep(250);
  }
  const failed = lastFailure ? `; the last read failed: ${lastFailure.message}` : '';
  throw new Error(`ClickHouse holds ${have} of ${expected} spans after ${timeoutMs} ms${failed}`, { cause: lastFailure });
}

/** The record fields the simulator's truth states, as the read API reports them. */
export function expectedRecord(t: LifecycleTruth) {
  return {
    generation: t.generation,
    resolution: t.resolution,
    hold_ms: t.hold_ms,
    transfer_tail_ms: t.transfer_tail_ms,
    late_writes: t.late_writes.length,
    release_reason: t.release_reason ?? '',
    acked_ranks: t.acked_ranks,
    expected_ranks: t.expected_ranks,
    missing_ranks: t.missing_ranks,
    stale_acks_accepted: t.stale_acks.accepted,
    stale_acks_rejected: t.stale_acks.rejected,
    admission_outcome: t.admission,
    // Only decode's own spans name it: a request dropped before allocation left none.
    decode_engine: t.allocated ? t.decode_engine : '',
    unsafe_release: t.flags.includes('unsafe_release'),
  };
}

export function actualRecord(r: Record<string, unknown>): ReturnType<typeof expectedRecord> {
  return {
    generation: r.generation as number,
    resolution: r.resolution as LifecycleTruth['resolution'],
    hold_ms: r.hold_ms as number | null,
    transfer_tail_ms: r.transfer_tail_ms as number | null,
    late_writes: r.late_writes as number,
    release_reason: r.release_reason as string,
    acked_ranks: r.acked_ranks as number[],
    expected_ranks: r.expected_ranks as number[],
    missing_ranks: r.missing_ranks as number[],
    stale_acks_accepted: r.stale_acks_accepted as number,
    stale_acks_rejected: r.stale_acks_rejected as number,
    admission_outcome: r.admission_outcome as LifecycleTruth['admission'],
    decode_engine: r.decode_engine as string,
    unsafe_release: r.unsafe_release as boolean,
  };
}

/** Asks the read API for every request id of the truth and compares each generation's record. */
export async function assertReadApiMatchesTruth(apiUrl: string, truth: LifecycleTruth[]): Promise<void> {
  const byId = new Map<string, LifecycleTruth[]>();
  for (const t of truth) byId.set(t.request_id, [...(byId.get(t.request_id) ?? []), t]);
  const ids = [...byId.keys()];
  const check = async (id: string) => {
    const generations = byId.get(id) as LifecycleTruth[];
    const res = await fetch(`${apiUrl}/api/lifecycles/${encodeURIComponent(id)}`);
    if (res.status !== 200) assert.fail(`request ${id}: ${res.status} ${(await res.text()).slice(0, 500)}`);
    const body = (await res.json()) as { request_id: string; lifecycles: Record<string, unknown>[] };
    assert.equal(body.request_id, id);
    assert.deepEqual(
      body.lifecycles.map(actualRecord),
      generations.sort((a, b) => a.generation - b.generation).map(expectedRecord),
      `request ${id}`,
    );
  };
  // A few requests in flight at once, as several on-call engineers would.
  for (let i = 0; i < ids.length; i += 8) await Promise.all(ids.slice(i, i + 8).map(check));
  // The same records again through the batch lookup, as many ids per read as it takes, with one id that has none.
  for (let i = 0; i < ids.length; i += MAX_LOOKUP_REQUEST_IDS - 1) {
    const chunk = ids.slice(i, i + MAX_LOOKUP_REQUEST_IDS - 1);
    const query = [...chunk, 'no-such-request'].map((id) => `request_id=${encodeURIComponent(id)}`).join('&');
    const res = await fetch(`${apiUrl}/api/lifecycles?${query}`);
    assert.equal(res.status, 200, `batch lookup from ${chunk[0]}`);
    const body = (await res.json()) as { lifecycles: Record<string, unknown>[]; not_found: string[] };
    assert.deepEqual(body.not_found, ['no-such-request']);
    assert.deepEqual(
      body.lifecycles.map((l) => [l.request_id, actualRecord(l)]),
      [...chunk].sort().flatMap((id) => (byId.get(id) as LifecycleTruth[]).map((t) => [id, expectedRecord(t)])),
      `batch lookup from ${chunk[0]}`,
    );
    // Their progress through the named query, the list as text (how a script or the bench's poller asks): the same
    // lifecycles, in the same order, with the same times and resolution as the records.
    const progress = await fetch(
      `${apiUrl}/api/queries/lifecycle_progress_by_requests?request_ids=${encodeURIComponent(formatStringListText([...chunk, "no-such-'request"]))}`,
    );
    assert.equal(progress.status, 200, `progress lookup from ${chunk[0]}`);
    const pick = (l: Record<string, unknown>) => [l.cluster, l.request_id, l.generation, l.first_seen, l.last_seen, l.resolution];
    assert.deepEqual(
      ((await progress.json()) as { rows: Record<string, unknown>[] }).rows.map(pick),
      body.lifecycles.map(pick),
      `progress lookup from ${chunk[0]}`,
    );
  }
}
