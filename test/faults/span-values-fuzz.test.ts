/**
 * Property-based fuzzing of span VALUES, end to end: the real collector (OTLP/HTTP), librdkafka's mock Kafka cluster,
 * the real pipeline and embedded ClickHouse (chdb). fast-check generates PD spans of every kind whose every attribute
 * and timestamp ranges over its type's whole domain and the edges of its column (test/support/span-values.ts): ints
 * at 0, 2^31-1, 2^31, 2^32-1, 2^32, 2^53-1 and beyond, negative, fractional, NaN and infinities, wrong types; strings
 * empty, unicode, control characters, 1024 and 1025 code units, lone surrogates; page arrays empty, 4096 and 4097
 * items, with out-of-range members; timestamps over the whole uint64 domain with DateTime's and DateTime64's ends,
 * the clock skew's and the retention's edges, ends before starts; unknown names, wrong roles, missing attributes,
 * ignored attributes past the collector's limits.
 *
 * Each span goes in a request of its own, protobuf or JSON, next to a span known to be valid. What must hold:
 * - every request is answered 200 (one bad span never costs its neighbour), the valid span is never rejected and is
 *   stored exactly: ingestion of valid spans never stops;
 * - each fuzzed span is either rejected (partial success: one rejected span, a reason naming the field the model
 *   finds at fault or on an edge) and not stored, or stored once with every column equal to what was sent:
 *   timestamps to the nanosecond, ints exactly, arrays item by item. Never both, never neither; nothing wrapped or
 *   clamped; a span the model calls valid is never rejected, one it calls invalid never accepted;
 * - nothing lands in the pipeline's span_dead_letters (rows ClickHouse refused after the collector accepted them).
 *
 * Spans are read back by span id (unique per span sent) rather than request id: the request id is fuzzed too.
 * The seed is fixed (HOLDSCOPE_SPAN_FUZZ_SEED overrides it); on failure fast-check's shrunk batch of spans and the
 * problems it shows are in the assertion message. Replays draw the same spans, with times relative to the clock.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import protobuf from 'protobufjs';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import type { OtlpResourceSpans } from '../../contract/index.ts';
import { startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { decodeResource, holdSpan } from '../support/fuzz-otlp.ts';
import {
  buildSpan,
  COLUMN_DEFAULTS,
  encodeRequest,
  expectation,
  resolveTimes,
  RETENTION_NS,
  spanCaseArb,
  type Expectation,
  type SpanCase,
} from '../support/span-values.ts';
import { startStack } from '../support/stack.ts';

const SEED = Number(process.env.HOLDSCOPE_SPAN_FUZZ_SEED ?? 20_261_205);
/** Batches (fast-check runs; HOLDSCOPE_SPAN_FUZZ_RUNS overrides) of 1 to 24 spans: some 750 spans, 50 to 80 s on 2 cores. */
const NUM_RUNS = Number(process.env.HOLDSCOPE_SPAN_FUZZ_RUNS ?? 60);
const MAX_BATCH = 24;
/** Requests in flight at once. */
const CONCURRENCY = 8;
/** How long the pipeline may take to store a batch's accepted spans. */
const STORE_TIMEOUT_MS = 30_000;
/** The whole property, shrinking included: past it the run fails (failOnInterrupt) with what it has. */
const TIME_LIMIT_MS = 420_000;

const COLUMNS = `cluster, request_id, generation, name, trace_id, span_id,
  toString(toUnixTimestamp64Nano(start_time)) AS start_ns, toString(toUnixTimestamp64Nano(end_time)) AS end_ns,
  engine_id, engine_role, engine_version, backend, capacity_slots, rank, chunk_index, pages, slots,
  admission_outcome, admission_reason, transfer_status, toString(transfer_bytes) AS transfer_bytes, decode_engine_id,
  expected_ranks, hold_timeout_ms, chunks_dropped, inflight, failed_sends, ack_withheld, ack_generation, ack_accepted,
  missing_ranks, timeout_action, release_reason, checksum_outcome, cancel_targets`;

const nowNs = (): bigint => BigInt(Date.now()) * 1_000_000n;

/** ExportTraceServiceResponse's partial_success, from a JSON or protobuf answer. */
function partialSuccess(body: Buffer, encoding: 'protobuf' | 'json'): { rejected: number; message: string } {
  if (encoding === 'json') {
    const doc = JSON.parse(body.toString('utf8') || '{}') as {
      partialSuccess?: { rejectedSpans?: string | number; errorMessage?: string };
    };
    return { rejected: Number(doc.partialSuccess?.rejectedSpans ?? 0), message: doc.partialSuccess?.errorMessage ?? '' };
  }
  let rejected = 0;
  let message = '';
  const outer = protobuf.Reader.create(body);
  while (outer.pos < outer.len) {
    const tag = outer.uint32();
    if (tag === ((1 << 3) | 2)) {
      const inner = protobuf.Reader.create(outer.bytes());
      while (inner.pos < inner.len) {
        const t = inner.uint32();
        if (t === ((1 << 3) | 0)) rejected = Number(inner.int64().toString());
        else if (t === ((2 << 3) | 2)) message = inner.string();
        else inner.skipType(t & 7);
      }
    } else outer.skipType(tag & 7);
  }
  return { rejected, message };
}

const clip = (s: string, n = 300) => (s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s);
const show = (v: unknown): string => {
  const text = JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x));
  return clip(text ?? String(v), 200);
};

/** Each column that differs: sent (expected) against read back. */
function differences(expected: Record<string, unknown>, actual: Record<string, unknown>): string[] {
  const out: string[] = [];
  for (const [column, want] of Object.entries(expected)) {
    if (!isDeepStrictEqual(actual[column], want)) out.push(`${column}: sent ${show(want)}, read back ${show(actual[column])}`);
  }
  return out;
}

interface Sent {
  kase: SpanCase;
  expect: Expectation;
  spanId: string;
  sentinelId: string;
  sentinelRow: Record<string, unknown>;
  status: number;
  rejected: number;
  message: string;
  error?: string;
  startNs: bigint;
}

describe('faults: span values fuzz (fast-check; collector → mock Kafka → pipeline → chdb)', () => {
  let mock: KafkaMock;
  let client: ClickHouseClient;
  let stack: Awaited<ReturnType<typeof startStack>>;
  const dataPath = mkdtempSync(join(tmpdir(), 'holdscope-span-fuzz-'));

  before(async () => {
    mock = await startKafkaMock({ brokers: 1 });
    client = await createClickHouse({ dataPath });
    stack = await startStack(mock, client, { partitions: 4 });
  });
  after(async () => {
    await stack?.stop();
    await client?.close();
    await mock?.stop();
    rmSync(dataPath, { recursive: true, force: true });
  });

  it('rejects each span with a reason naming its field, or stores it exactly; valid spans keep flowing', { timeout: 600_000 }, async () => {
    const started = Date.now();
    const counts = { sent: 0, rejected: 0, stored: 0, equal: 0, either: 0, expired: 0, sentinels: 0, sentinelsStored: 0, runs: 0 };
    let ids = 0;
    const nextIds = () => {
      ids++;
      return { traceId: randomBytes(16).toString('hex'), spanId: ids.toString(16).padStart(16, '0') };
    };
    let accepted = 0; // spans the collector accepted so far (fuzzed and sentinels)
    let processedBase = 0; // spans the pipeline wrote or skipped but that were never accounted (after a timeout)
    const m = stack.pipeline.metrics;
    const total = async (c: { get(): Promise<{ values: { value: number }[] }> }) => (await c.get()).values.reduce((a, v) => a + v.value, 0);
    const processed = async () =>
      (await total(m.rowsInserted)) + (await total(m.deadLetterRows)) + (await total(m.invalidSpans)) - processedBase;

    const sendOne = async (kase: SpanCase): Promise<Sent> => {
      const fuzzIds = nextIds();
      const sentinel = nextIds();
      const now = nowNs();
      const times = resolveTimes(kase, now);
      const expect = expectation(kase, fuzzIds, times, now);
      const { span, resource } = buildSpan(kase, fuzzIds, times);
      const sentinelRequestId = `sentinel-${SEED}-${sentinel.spanId}`;
      const sentinelSpan = holdSpan(sentinelRequestId, sentinel.spanId, sentinel.traceId, now);
      sentinelSpan.endTimeUnixNano = now; // an instant, as the contract asks of pd.hold
      const sentinelRow = {
        cluster: 'default',
        request_id: sentinelRequestId,
        generation: 0,
        name: 'pd.hold',
        trace_id: sentinel.traceId,
        span_id: sentinel.spanId,
        start_ns: String(now),
        end_ns: String(now),
        engine_id: 'sentinel',
        engine_role: 'decode',
        engine_version: 'v1',
        backend: 'mooncake',
        capacity_slots: 1000,
        ...COLUMN_DEFAULTS,
        expected_ranks: [0, 1],
        hold_timeout_ms: 30000,
        slots: 64,
        pages: [1, 2, 3, 4],
      };
      const scope = { name: 'span-values-fuzz', version: '1' };
      const fuzzed: OtlpResourceSpans = { resource, scopeSpans: [{ scope, spans: [span] }] };
      const neighbour: OtlpResourceSpans = { resource: decodeResource('sentinel'), scopeSpans: [{ scope, spans: [sentinelSpan] }] };
      const sent: Sent = {
        kase,
        expect,
        spanId: fuzzIds.spanId,
        sentinelId: sentinel.spanId,
        sentinelRow,
        status: 0,
        rejected: 0,
        message: '',
        startNs: times.start,
      };
      try {
        const body = encodeRequest(fuzzed, neighbour, kase.encoding, kase.jsonNumbers);
        const res = await fetch(`${stack.collectorUrl}/v1/traces`, {
          method: 'POST',
          body,
          headers: { 'content-type': kase.encoding === 'json' ? 'application/json' : 'application/x-protobuf' },
          signal: AbortSignal.timeout(60_000),
        });
        const answer = Buffer.from(await res.arrayBuffer());
        sent.status = res.status;
        if (res.status === 200) Object.assign(sent, partialSuccess(answer, kase.encoding));
        else sent.message = clip(answer.toString('utf8'), 500);
      } catch (error) {
        sent.error = `${(error as Error).message} ${String((error as Error).cause ?? '')}`;
      }
      return sent;
    };

    const runBatch = async (cases: SpanCase[]): Promise<string[]> => {
      counts.runs++;
      const sent: Sent[] = [];
      for (let i = 0; i < cases.length; i += CONCURRENCY) sent.push(...(await Promise.all(cases.slice(i, i + CONCURRENCY).map(sendOne))));
      for (const s of sent) if (s.status === 200) accepted += 2 - s.rejected;
      // The pipeline has handled every accepted span once its counters (rows stored, rows dead-lettered, spans it
      // found invalid) reach the collector's count; a span it lost shows up below as accepted but not stored.
      const deadline = Date.now() + STORE_TIMEOUT_MS;
      while ((await processed()) < accepted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const lag = accepted - (await processed());
      if (lag > 0) processedBase -= lag; // account for them, so later batches do not wait on them too
      const readAt = nowNs();
      const idList = sent.flatMap((s) => [s.spanId, s.sentinelId]);
      const rows = (await (
        await client.query({
          query: `SELECT ${COLUMNS} FROM ${stack.database}.spans FINAL WHERE span_id IN {ids:Array(String)}`,
          query_params: { ids: idList },
          format: 'JSONEachRow',
        })
      ).json()) as Record<string, unknown>[];
      const dead = (await (
        await client.query({
          query: `SELECT span_id, error_name, error_message FROM ${stack.database}.span_dead_letters FINAL WHERE span_id IN {ids:Array(String)}`,
          query_params: { ids: idList },
          format: 'JSONEachRow',
        })
      ).json()) as { span_id: string; error_name: string; error_message: string }[];
      const bySpan = new Map<string, Record<string, unknown>[]>();
      for (const r of rows) bySpan.set(r.span_id as string, [...(bySpan.get(r.span_id as string) ?? []), r]);

      const problems: string[] = [];
      for (const s of sent) {
        const what = () =>
          `${s.kase.name} (${s.kase.encoding}${s.kase.encoding === 'json' && s.kase.jsonNumbers ? ', 64-bit ints as JSON numbers' : ''}) span ${s.spanId} [${s.expect.notes.join('; ') || 'valid'}]`;
        counts.sent++;
        counts.sentinels++;
        if (s.status !== 200) {
          problems.push(`${what()}: the request (with a valid span) was answered ${s.status || s.error}: ${s.message}`);
          continue;
        }
        // The valid neighbour: never rejected, stored exactly.
        const sentinelRows = bySpan.get(s.sentinelId) ?? [];
        if (sentinelRows.length !== 1)
          problems.push(`${what()}: its valid neighbour ${s.sentinelId} is stored ${sentinelRows.length} times`);
        else {
          const diff = differences(s.sentinelRow, sentinelRows[0] as Record<string, unknown>);
          if (diff.length > 0) problems.push(`${what()}: its valid neighbour is stored differently: ${diff.join('; ')}`);
          else counts.sentinelsStored++;
        }
        if (s.rejected < 0 || s.rejected > 1) {
          problems.push(`${what()}: ${s.rejected} spans rejected of the fuzzed one and a valid one: ${clip(s.message)}`);
          continue;
        }
        const stored = bySpan.get(s.spanId) ?? [];
        const letters = dead.filter((d) => d.span_id === s.spanId);
        if (s.expect.outcome === 'either') counts.either++;
        if (s.rejected === 1) {
          counts.rejected++;
          if (s.expect.outcome === 'stored') problems.push(`${what()}: a valid span was rejected: ${clip(s.message)}`);
          else if (!s.expect.reasons.some((re) => re.test(s.message)))
            problems.push(`${what()}: rejected for a reason naming none of the fields at fault: ${clip(s.message)}`);
          if (stored.length > 0) problems.push(`${what()}: rejected and stored too`);
          continue;
        }
        if (s.expect.outcome === 'rejected')
          problems.push(`${what()}: an invalid span was accepted${stored.length > 0 ? ' and stored' : ''}`);
        if (stored.length === 0) {
          const expired = s.expect.mayExpire && s.startNs + RETENTION_NS < readAt;
          if (expired) {
            counts.expired++;
            continue;
          }
          const why =
            letters.length > 0
              ? `ClickHouse refused it: ${letters.map((d) => `${d.error_name}: ${clip(d.error_message, 200)}`).join('; ')}`
              : 'in neither spans nor span_dead_letters';
          problems.push(`${what()}: accepted but not stored (${why})`);
          continue;
        }
        counts.stored++;
        if (stored.length > 1) problems.push(`${what()}: stored ${stored.length} times`);
        const diff = differences(s.expect.row, stored[0] as Record<string, unknown>);
        if (diff.length > 0) problems.push(`${what()}: stored differently from what was sent: ${diff.join('; ')}`);
        else counts.equal++;
      }
      if (lag > 0)
        problems.push(`the pipeline handled ${lag} accepted spans fewer than the collector accepted within ${STORE_TIMEOUT_MS} ms`);
      return problems;
    };

    let failure: unknown;
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(spanCaseArb, { minLength: 1, maxLength: MAX_BATCH, size: 'max' }), async (cases) => {
          const problems = await runBatch(cases);
          if (problems.length > 0)
            assert.fail(`${problems.length} problems in a batch of ${cases.length} spans:\n${problems.slice(0, 12).join('\n')}`);
        }),
        {
          seed: SEED,
          numRuns: NUM_RUNS,
          includeErrorInReport: true,
          plugins: [fc.interruptAfterTimeLimit(TIME_LIMIT_MS, { failOnInterrupt: true })],
        },
      );
    } catch (error) {
      failure = error;
    }
    const allDead = (await (
      await client.query({ query: `SELECT count() AS n FROM ${stack.database}.span_dead_letters FINAL`, format: 'JSONEachRow' })
    ).json()) as { n: number | string }[];
    const deadLetters = Number(allDead[0]?.n ?? 0);
    console.log(
      `faults: fuzz spans sent ${counts.sent}, rejected ${counts.rejected}, stored ${counts.stored}, equal ${counts.equal}, seed ${SEED}; ` +
        `${counts.either} on an edge, ${counts.expired} past the retention when read; valid neighbours ${counts.sentinels}, stored exactly ${counts.sentinelsStored}; ` +
        `span_dead_letters rows ${deadLetters}; ${counts.runs} batches (${NUM_RUNS} runs, shrinking included) in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    if (failure) throw failure;
    assert.equal(counts.sentinelsStored, counts.sentinels, 'every valid neighbour is stored exactly');
    assert.equal(counts.rejected + counts.stored + counts.expired, counts.sent, 'each span sent is rejected or stored');
    assert.equal(counts.equal, counts.stored, 'each span stored reads back equal');
    assert.equal(deadLetters, 0, 'span_dead_letters is empty: ClickHouse refused no row the collector accepted');
    assert.ok(
      counts.rejected > counts.sent / 10 && counts.stored > counts.sent / 10,
      `both outcomes are exercised: ${counts.rejected} rejected, ${counts.stored} stored of ${counts.sent}`,
    );
  });
});
