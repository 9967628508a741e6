/**
 * One long chaos run of the pipeline against the real components: librdkafka's mock Kafka cluster (3 brokers, a
 * topic of 6 partitions), a ClickHouse HTTP server (chdb) in its own process, an in-process collector, and
 * `holdscope pipeline` as OS processes. While simulated engines keep sending spans through the collector:
 * - the pipeline is SIGKILLed ten times at random moments, most of them with rows in hand (fetched, not yet
 *   acknowledged by ClickHouse), and each time a new process takes its place in the consumer group;
 * - once, the ClickHouse server is SIGKILLed and restarted some seconds later, under a running pipeline;
 * - a second member joins the group, and leaves it cleanly (SIGTERM) a few kills later.
 * At the end every span emitted must be stored once (distinct), the group committed to the end of every
 * partition, and every lifecycle record equal to the simulator's truth, while the processes' own counters show
 * that some spans were inserted more than once: replays happened, and changed nothing. (Most replays come from
 * commits the group refuses during a rebalance, which every join, leave and death sets off: the batch is stored,
 * its offsets are not, and the partition's next owner reads it again.)
 *
 * The schedule (where the outage and the membership changes fall among the kills, every delay, every simulated
 * round) comes from one seed, printed as a diagnostic; HOLDSCOPE_CHAOS_SEED=N replays it. The timing of the
 * processes themselves is not the seed's, so a replay repeats the plan, not every interleaving.
 *
 * Designed for 2.5-4 minutes on 2 cores: each SIGKILL costs about a session timeout (6 s, the mock's minimum for
 * quick joins) before the group hands the dead member's partitions over. Volume stays in the tens of thousands of
 * spans (about 25-35k), since the mock keeps at most about 5 MB per partition.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ScenarioName } from '../../emitter/index.ts';
import { Rng } from '../../common/index.ts';
import { migrate } from '../../pipeline/index.ts';
import { clickhouseClient, startClickHouseServer } from '../support/clickhouse-server.ts';
import { randomTopic, startKafkaMock } from '../support/kafka-mock.ts';
import { describeProcess, killLivePipelines, spawnPipeline, type PipelineProcess } from '../support/pipeline-process.ts';
import { randomDatabase, waitForSpans } from '../support/stack.ts';
import {
  add,
  assertStoredEqualsTruth,
  distinctSpans,
  nothingProduced,
  queryNumber,
  simulate,
  startCollector,
  stopwatch,
  waitFor,
  waitForGroupCaughtUp,
  type Produced,
} from '../support/truth-check.ts';

const KILLS = 10;
const PARTITIONS = 6;
/** Spans per second the engines send on average: about 30k spans over the run. */
const SPANS_PER_SECOND = 200;
/** Past this the engines pause: a slow machine stretching the run must not push the mock past 5 MB a partition. */
const MAX_SPANS = 60_000;
/** Lifecycles also compared through the read API (one HTTP request per request id). */
const READ_API_SAMPLE = 60;
/**
 * How long the second member may take to leave after SIGTERM. It finishes its batches in hand, waits for the fetches
 * in flight (kafkajs long-polls a broker for up to 5 s) and leaves the group; a SIGTERM that lands during a group join
 * first waits for the join, which the mock answers within a session timeout (6 s here) and kafkajs abandons after the
 * pipeline's rebalance timeout (20 s) plus 5 s. Past this bound the process is taken as hung. (`holdscope pipeline`
 * gives up by itself after --shutdown-timeout-ms, 30 s, exiting with status 1.)
 */
const LEAVE_TIMEOUT_MS = 20_000;
/** A leave slower than this prints the end of the member's log. */
const SLOW_LEAVE_MS = 10_000;
/** How long a kill waits for rows in hand before it strikes anyway. */
const MID_BATCH_WATCH_MS = 6000;
/** How long a process may take to join the group (after the dead member's session expires) and insert rows. */
const CONSUMING_TIMEOUT_MS = 90_000;

/** Simulated engines sending round after round through the collector, paced to SPANS_PER_SECOND, until stopped. */
class Engines {
  readonly produced: Produced = nothingProduced();
  /** Spans the simulator emitted, and the ones the collector acknowledged (simulate() fails if they differ). */
  offered = 0;
  acknowledged = 0;
  rounds = 0;
  lateWriteRounds = 0;
  /** The first failure (a span the collector did not accept), rethrown by check() and stop(). */
  error: unknown;
  private readonly stopping = new AbortController();
  private readonly done: Promise<void>;

  constructor(
    private readonly url: string,
    private readonly rng: Rng,
  ) {
    this.done = this.run().catch((error: unknown) => {
      this.error = error;
    });
  }

  private async run(): Promise<void> {
    const start = Date.now();
    while (!this.stopping.signal.aborted) {
      if (this.produced.spans < MAX_SPANS) {
        const round = ++this.rounds;
        // Mostly the mixed workload; some rounds of the late-write bug, whose records are the ones that matter most.
        const scenario: ScenarioName = this.rng.chance(0.25) ? 'late-write-bug' : 'mixed';
        if (scenario === 'late-write-bug') this.lateWriteRounds++;
        const summary = await simulate(this.url, scenario, this.rng.int(1, 1_000_000), this.rng.int(15, 40), `chaos-r${round}`);
        this.offered += summary.spansEmitted;
        this.acknowledged += summary.spansExported;
        add(this.produced, summary);
      }
      // Small rounds at a steady pace keep spans arriving during every fault rather than in a few bursts.
      const due = start + (this.produced.spans / SPANS_PER_SECOND) * 1000;
      await sleep(Math.max(100, due - Date.now()), undefined, { signal: this.stopping.signal }).catch(() => undefined);
    }
  }

  check(): void {
    if (this.error !== undefined) throw this.error;
  }

  /** Stops after the round in flight; rejects if any round failed. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.done;
    this.check();
  }
}

const inserted = (m: Record<string, number>) => m.holdscope_pipeline_rows_inserted_total ?? 0;
/** Consumers a process had to recreate after a crash: each one joins as a new member, which sets off another rebalance. */
const restarts = (m: Record<string, number>) => m.holdscope_pipeline_consumer_restarts_total ?? 0;
/** Commits the group refused during a rebalance (the batch was stored; it is read again). */
const refused = (m: Record<string, number>) => m.holdscope_pipeline_offset_commits_refused_total ?? 0;

/**
 * What the faults made the pipelines log (warn and above), message by message, most frequent first: where
 * the replays came from (commits refused during a rebalance, INSERTs retried) when a run's figures look odd.
 * Only each process's stderr tail is kept, so the counts are lower bounds.
 */
function logSummary(processes: PipelineProcess[]): string[] {
  const byMessage = new Map<string, number>();
  for (const p of processes) {
    for (const line of p.stderr().split('\n')) {
      if (!line.trim()) continue;
      let message: string;
      try {
        const entry = JSON.parse(line) as { level?: unknown; msg?: unknown; error?: unknown; err?: unknown };
        if (typeof entry.level === 'number' && entry.level < 40) continue; // the second member also logs kafkajs at info
        message = [entry.msg, entry.error ?? entry.err].filter((part) => typeof part === 'string').join(': ');
      } catch {
        message = line;
      }
      message = message.slice(0, 100);
      byMessage.set(message, (byMessage.get(message) ?? 0) + 1);
    }
  }
  const top = [...byMessage].sort((a, b) => b[1] - a[1]).slice(0, 8);
  return top.length > 0 ? top.map(([message, n]) => `${n} × ${message}`) : ['(nothing)'];
}

/**
 * Consumer restarts by cause (the kafkajs error type each `consumer crashed; restarting` line names), from the
 * processes' stderr tails: a lower bound, like logSummary. INVALID_REQUEST is librdkafka's mock answering a
 * follower's SyncGroup that comes after the leader's (its sync completes on the leader's assignment alone); a real
 * broker hands the follower its assignment.
 */
function restartCauses(processes: PipelineProcess[]): string {
  const byReason = new Map<string, number>();
  for (const p of processes) {
    for (const line of p.stderr().split('\n')) {
      if (!line.includes('consumer crashed; restarting')) continue;
      let reason = 'unknown';
      try {
        const entry = JSON.parse(line) as { reason?: unknown };
        if (typeof entry.reason === 'string') reason = entry.reason;
      } catch {
        // a line cut by the tail
      }
      byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
    }
  }
  return [...byReason].map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none logged';
}

test(
  'pipeline chaos: ten SIGKILLs, a ClickHouse restart and a member joining and leaving while spans flow; stored = truth',
  { timeout: 480_000 },
  async (t: TestContext) => {
    const wallStart = Date.now();
    const seed = process.env.HOLDSCOPE_CHAOS_SEED ? Number(process.env.HOLDSCOPE_CHAOS_SEED) : randomInt(1, 2 ** 31);
    assert.ok(Number.isSafeInteger(seed), `HOLDSCOPE_CHAOS_SEED must be an integer, got ${process.env.HOLDSCOPE_CHAOS_SEED}`);
    t.diagnostic(`seed ${seed} (replay the plan with HOLDSCOPE_CHAOS_SEED=${seed})`);
    const rng = new Rng(seed);
    const plan = rng.fork('plan');
    const step = stopwatch(t);

    // Where the ClickHouse outage and the membership changes fall: after which kill (the new primary is running).
    const outageAfter = plan.int(1, 3);
    const joinAfter = plan.int(outageAfter + 1, 5);
    const leaveAfter = joinAfter + 2; // the primary is SIGKILLed twice while the second member is in
    t.diagnostic(
      `plan: ClickHouse outage after kill ${outageAfter}, second member joins after kill ${joinAfter} and leaves after kill ${leaveAfter}`,
    );

    // Everything started, stopped in reverse order at the end (passed or not).
    const cleanups: (() => Promise<unknown>)[] = [];
    const cleanup = <T>(resource: T, stop: (r: T) => Promise<unknown>): T => {
      cleanups.push(() => stop(resource));
      return resource;
    };
    let engines: Engines | undefined;
    try {
      const mock = cleanup(await startKafkaMock({ brokers: 3 }), (m) => m.stop());
      const server = cleanup(await startClickHouseServer(), (s) => s.stop());
      const client = cleanup(clickhouseClient(server.url), (c) => c.close());
      const topic = randomTopic('chaos');
      const groupId = `g-${topic}`;
      const database = randomDatabase('chaos');
      await mock.createTopic(topic, PARTITIONS);
      await migrate(client, { database, retentionDays: 30 });
      // Every span row any pipeline inserted, replays included. The processes' own counters cannot say this: a
      // SIGKILLed process takes the rows it inserted after its last scrape with it. A plain MergeTree never merges
      // rows away, unlike spans.
      await client.command({
        query: `CREATE MATERIALIZED VIEW ${database}.chaos_span_rows ENGINE = MergeTree ORDER BY tuple() AS SELECT span_id FROM ${database}.spans`,
      });
      const collector = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());
      const args = [
        '--kafka-brokers',
        mock.brokers.join(','),
        '--topics',
        topic,
        '--group-id',
        groupId,
        '--clickhouse-url',
        server.url,
        '--database',
        database,
      ];
      // Small INSERTs, few partitions at once: many fetch/INSERT/commit steps for the kills to land between.
      const tuning = ['--linger-ms', '20', '--max-batch-rows', '500', '--partitions-consumed-concurrently', '2'];
      const processes: PipelineProcess[] = [];
      const spawnMember = async (name: string, env: Record<string, string> = {}) => {
        const p = cleanup(await spawnPipeline(name, [...args, ...tuning], env), (q) => q.stop());
        processes.push(p);
        return p;
      };

      // Each process's counters as last scraped: just before its SIGKILL, before its SIGTERM, or at the end.
      const lastMetricsOf = new Map<string, Record<string, number>>();
      const counts = { kills: 0, killsWithRowsInHand: 0, clickhouseRestarts: 0, joins: 0, leaves: 0 };

      let primary = await spawnMember('p1');
      step('first pipeline ready');
      engines = new Engines(collector.url, rng.fork('engines'));
      const running = engines;
      /** Waits until `p` has inserted rows past `than`: it is in the group, holds partitions, and stores. */
      const waitInserting = async (p: PipelineProcess, than: number, what: string) => {
        await waitFor(
          what,
          async () => {
            running.check();
            return inserted(await p.metrics()) > than;
          },
          CONSUMING_TIMEOUT_MS,
          () => describeProcess(p),
        );
      };

      let memberB: PipelineProcess | undefined;
      /** How long the second member took to exit after its SIGTERM. */
      let leaveMs = 0;
      for (let kill = 1; kill <= KILLS; kill++) {
        // A random moment while the primary consumes: once it inserts, after a random delay, at the first sight of
        // rows in hand (fetched, not yet acknowledged by ClickHouse). The engines send a round every 1-4 s, which
        // the pipeline stores in a fraction of a second: the watch lasts long enough to see the next one.
        await waitInserting(primary, 0, `${primary.name} inserts rows`);
        await sleep(plan.uniform(300, 3000));
        let last = await primary.metrics();
        const watchUntil = Date.now() + MID_BATCH_WATCH_MS;
        while ((last.holdscope_pipeline_rows_pending ?? 0) === 0 && Date.now() < watchUntil) {
          await sleep(20);
          last = await primary.metrics();
        }
        assert.ok(primary.alive(), describeProcess(primary));
        await primary.kill();
        counts.kills++;
        const pending = last.holdscope_pipeline_rows_pending ?? 0;
        if (pending > 0) counts.killsWithRowsInHand++;
        lastMetricsOf.set(primary.name, last);
        const killed = primary.name;
        primary = await spawnMember(`p${kill + 1}`);
        step(
          `kill ${kill}: ${killed} SIGKILLed after inserting ${inserted(last)} rows, ${pending} in hand; ${primary.name} started; ${running.produced.spans} spans sent`,
        );

        if (kill === outageAfter) {
          // ClickHouse dies under a consuming pipeline and stays down for a few seconds while spans keep arriving:
          // the pipeline must hold its batches, retry, and carry on once the server is back.
          await waitInserting(primary, 0, `${primary.name} inserts rows before the outage`);
          const before = await primary.metrics();
          await server.kill();
          const downAt = Date.now();
          const downFor = plan.uniform(4000, 8000);
          await waitFor(
            `${primary.name} fails INSERTs and retries them while ClickHouse is down`,
            async () =>
              ((await primary.metrics()).holdscope_pipeline_insert_failures_total ?? 0) >
              (before.holdscope_pipeline_insert_failures_total ?? 0),
            30_000,
            () => describeProcess(primary),
          );
          await sleep(Math.max(0, downFor - (Date.now() - downAt)));
          const during = await primary.metrics();
          assert.ok(primary.alive(), `the pipeline kept retrying through the outage rather than exiting\n${describeProcess(primary)}`);
          await server.restart();
          counts.clickhouseRestarts++;
          await waitInserting(primary, inserted(during), `${primary.name} inserts again after ClickHouse restarted`);
          step(
            `ClickHouse down ${((Date.now() - downAt) / 1000).toFixed(1)} s under ${primary.name}: ${(during.holdscope_pipeline_insert_failures_total ?? 0) - (before.holdscope_pipeline_insert_failures_total ?? 0)} failed INSERTs, ${during.holdscope_pipeline_rows_pending ?? 0} rows held; restarted, inserting again`,
          );
        }

        if (kill === joinAfter) {
          // A second member joins: the group splits the partitions, and both must store while both are in. The
          // primary's rows are counted from b's first INSERT, which only comes once the split is done.
          // Its kafkajs logs at info (joins, generations, stops) explain a slow leave, should one come.
          const b = await spawnMember('b', { KAFKAJS_LOG_LEVEL: 'info' });
          memberB = b;
          counts.joins++;
          await waitInserting(b, 0, 'the second member inserts rows');
          const primaryAtSplit = inserted(await primary.metrics());
          await waitInserting(primary, primaryAtSplit, `${primary.name} inserts rows while the second member is in`);
          const bRows = inserted(await b.metrics());
          step(
            `second member joined: b inserted ${bRows} rows, ${primary.name} ${inserted(await primary.metrics()) - primaryAtSplit} more beside it`,
          );
          assert.ok(bRows > 0, 'the second member inserted rows while both were in');
        }

        if (kill === leaveAfter) {
          // The second member leaves cleanly, as on a scale-down: it finishes its batches and the group hands its
          // partitions to the primary.
          const b = memberB as PipelineProcess;
          assert.ok(b.alive(), describeProcess(b));
          const last = await b.metrics();
          const leaveStart = Date.now();
          const ended = await b.terminate(LEAVE_TIMEOUT_MS);
          leaveMs = Date.now() - leaveStart;
          assert.equal(
            ended,
            'exit code 0',
            `SIGTERM ends the second member cleanly within ${LEAVE_TIMEOUT_MS / 1000} s\n${describeProcess(b)}`,
          );
          counts.leaves++;
          lastMetricsOf.set(b.name, last);
          memberB = undefined;
          step(`second member left in ${leaveMs} ms after inserting ${inserted(last)} rows`);
          if (leaveMs > SLOW_LEAVE_MS) {
            t.diagnostic(`slow leave (${leaveMs} ms); the end of the second member's log:`);
            for (const line of b.stderr().trim().split('\n').slice(-40)) t.diagnostic(`  ${line}`);
          }
        }
      }

      // The last process, too, consumes under a live stream before the engines stop.
      await waitInserting(primary, 0, `${primary.name} inserts rows`);
      await running.stop();
      const { produced } = running;
      step(`engines stopped: ${produced.spans} spans in ${running.rounds} rounds (${running.lateWriteRounds} late-write-bug)`);
      await waitForSpans(client, database, produced.spans, 120_000).catch((error: Error) =>
        assert.fail(`${error.message}\n${describeProcess(primary)}`),
      );
      await waitForGroupCaughtUp(mock, groupId, topic, 60_000);
      step('every span stored, every partition committed to its end');
      assert.ok(primary.alive(), describeProcess(primary));
      lastMetricsOf.set(primary.name, await primary.metrics());

      const accepted = (await collector.collector.metrics.spansAccepted.get()).values.reduce((sum, v) => sum + v.value, 0);
      assert.equal(running.acknowledged, running.offered, 'the collector acknowledged every span offered');
      assert.equal(accepted, running.offered, 'the collector counted every span it acknowledged');
      assert.ok(
        produced.truth.some((l) => l.late_writes.length > 0),
        'the truth has late writes',
      );
      await assertStoredEqualsTruth(t, server, database, produced, READ_API_SAMPLE);
      step('compared with the truth');

      const distinct = await distinctSpans(client, database);
      const sum = (of: (m: Record<string, number>) => number) => [...lastMetricsOf.values()].reduce((total, m) => total + of(m), 0);
      const rowsInserted = await queryNumber(client, `SELECT count() AS n FROM ${database}.chaos_span_rows`);
      // One diagnostic a line: the TAP reporter escapes newlines inside one.
      t.diagnostic('what the pipelines logged (warn and above):');
      for (const line of logSummary(processes)) t.diagnostic(`  ${line}`);
      t.diagnostic(
        `span rows inserted per process, as last scraped before it ended: ${[...lastMetricsOf].map(([name, m]) => `${name} ${inserted(m)}`).join(', ')}`,
      );
      assert.equal(counts.kills, KILLS);
      // The kills were meant to strike mid-batch; a run where most found nothing in hand tested less than it claims.
      assert.ok(counts.killsWithRowsInHand >= KILLS / 2, `only ${counts.killsWithRowsInHand} of ${KILLS} SIGKILLs found rows in hand`);
      // Rows in hand at a kill are read again by the next process; whether any had already been inserted (and so
      // are stored twice, which must change nothing) depends on where the kill fell between INSERT and commit. Runs
      // range from 0 to ~500 such rows: reported below, not required. Never fewer rows than spans, though.
      assert.ok(rowsInserted >= produced.spans, `${rowsInserted} rows inserted for ${produced.spans} spans`);

      const wall = (Date.now() - wallStart) / 1000;
      const figures = [
        `seed ${seed}`,
        `${running.offered} spans offered`,
        `${accepted} acknowledged by the collector`,
        `${distinct} distinct stored`,
        `${rowsInserted} rows inserted (${rowsInserted - produced.spans} duplicates)`,
        `${counts.kills} pipeline SIGKILLs survived (${counts.killsWithRowsInHand} with rows in hand)`,
        `${counts.clickhouseRestarts} ClickHouse restart`,
        `${counts.joins} member join, ${counts.leaves} leave (in ${(leaveMs / 1000).toFixed(1)} s)`,
        `${sum(restarts)} consumer restarts (causes logged: ${restartCauses(processes)})`,
        `${sum(refused)} offset commits refused in rebalances`,
        `${produced.truth.length} lifecycles checked (${READ_API_SAMPLE}+ request ids through the read API)`,
        `wall ${wall.toFixed(1)} s`,
      ].join('; ');
      t.diagnostic(figures);
      console.log(`faults: pipeline chaos: ${figures}`);
    } finally {
      await engines?.stop().catch(() => undefined);
      for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
      killLivePipelines();
    }
  },
);
