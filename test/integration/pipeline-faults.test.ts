/**
 * The pipeline under faults, against the real components: librdkafka's mock Kafka cluster, a ClickHouse HTTP
 * server (chdb) in its own process, and `holdscope pipeline` itself as separate OS processes
 * (`node bin/holdscope.js pipeline ...`), so that either side can be SIGKILLed mid-stream.
 *
 * Every test compares what the read API reports with the simulator's ground truth, lifecycle by lifecycle, and
 * checks that no span is missing or counted twice and that the consumer group committed every partition to its
 * end. Pipelines log at warn to a captured stderr that failure messages quote.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrate } from '../../pipeline/index.ts';
import { clickhouseClient, startClickHouseServer } from '../support/clickhouse-server.ts';
import { randomTopic, startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { describeProcess, killLivePipelines, spawnPipeline, type PipelineProcess } from '../support/pipeline-process.ts';
import { randomDatabase, waitForSpans } from '../support/stack.ts';
import {
  add,
  assertMockKeptEveryMessage,
  assertStoredEqualsTruth,
  nothingProduced,
  distinctSpans,
  partitionsBehind,
  simulate,
  startCollector,
  stopwatch,
  waitFor,
  waitForGroupCaughtUp,
  type Produced,
} from '../support/truth-check.ts';

describe('pipeline faults: collector → Kafka → `holdscope pipeline` processes → ClickHouse HTTP server → read API', () => {
  let mock: KafkaMock;
  // Everything a test started, stopped in reverse order after it (passed or not).
  let cleanups: (() => Promise<unknown>)[] = [];
  const cleanup = <T>(resource: T, stop: (r: T) => Promise<unknown>): T => {
    cleanups.push(() => stop(resource));
    return resource;
  };

  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
  });
  afterEach(async () => {
    for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
    cleanups = [];
  });
  after(async () => {
    killLivePipelines();
    await mock?.stop();
  });

  it('end to end on the ClickHouse HTTP server equals the ground truth for every lifecycle', { timeout: 120_000 }, async (t) => {
    const step = stopwatch(t);
    const server = cleanup(await startClickHouseServer(), (s) => s.stop());
    const client = cleanup(clickhouseClient(server.url), (c) => c.close());
    const topic = randomTopic('faults-e2e');
    const database = randomDatabase('faults_e2e');
    await mock.createTopic(topic, 6);
    const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());

    // Kafka and ClickHouse from the environment, the rest from flags; the pipeline creates the schema itself.
    const pipeline = cleanup(
      await spawnPipeline('e2e', ['--topics', topic, '--group-id', `g-${topic}`, '--database', database, '--linger-ms', '50'], {
        KAFKA_BROKERS: mock.brokers.join(','),
        CLICKHOUSE_URL: server.url,
      }),
      (p) => p.stop(),
    );

    step('pipeline ready');
    const produced: Produced = nothingProduced();
    add(produced, await simulate(url, 'mixed', 11, 200, 'e2e-mixed'));
    add(produced, await simulate(url, 'late-write-bug', 12, 60, 'e2e-late'));
    assert.ok(
      produced.truth.some((l) => l.late_writes.length > 0),
      'the truth has late writes',
    );
    assert.ok(produced.truth.some((l) => l.resolution === 'open') && produced.truth.some((l) => l.resolution === 'timeout'));

    step(`${produced.spans} spans produced`);
    await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) =>
      assert.fail(`${error.message}\n${describeProcess(pipeline)}`),
    );
    await waitForGroupCaughtUp(mock, `g-${topic}`, topic);
    step('all spans stored and committed');
    const metrics = await pipeline.metrics();
    assert.ok((metrics.holdscope_pipeline_rows_inserted_total ?? 0) >= produced.spans, 'the process reports the rows it inserted');
    await assertStoredEqualsTruth(t, server, database, produced, 'all');
    step('compared with the truth');
    assert.ok(pipeline.alive(), describeProcess(pipeline));
  });

  it(
    'survives ClickHouse killed for 20 s and the pipeline SIGKILLed mid-batch: nothing lost, nothing counted twice',
    { timeout: 150_000 },
    async (t) => {
      const step = stopwatch(t);
      const server = cleanup(await startClickHouseServer(), (s) => s.stop());
      const client = cleanup(clickhouseClient(server.url), (c) => c.close());
      const topic = randomTopic('faults-outage');
      const groupId = `g-${topic}`;
      const database = randomDatabase('faults_outage');
      await mock.createTopic(topic, 6);
      await migrate(client, { database, retentionDays: 30 });
      const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());
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
      // Small INSERTs, few partitions at once: many INSERT/commit steps for the faults to land between.
      const tuning = ['--linger-ms', '20', '--max-batch-rows', '500', '--partitions-consumed-concurrently', '2'];

      // The first part of the stream is in Kafka before the pipeline starts.
      const produced: Produced = nothingProduced();
      add(produced, await simulate(url, 'mixed', 21, 300, 'outage-a'));
      add(produced, await simulate(url, 'late-write-bug', 22, 100, 'outage-late'));

      step(`${produced.spans} spans in Kafka`);
      const first = cleanup(await spawnPipeline('first', [...args, ...tuning]), (p) => p.stop());
      const spansIn = () => distinctSpans(client, database);
      await waitFor(
        'first rows in ClickHouse',
        async () => (await spansIn()) > 0,
        30_000,
        () => describeProcess(first),
      );

      const atKill = await spansIn();
      await server.kill();
      t.diagnostic(`ClickHouse SIGKILLed with ${atKill} of ${produced.spans} spans stored`);
      // More of the stream arrives while ClickHouse is down: the pipeline fetches it and must hold it, retrying.
      const outageStart = Date.now();
      add(produced, await simulate(url, 'mixed', 23, 300, 'outage-b'));
      await sleep(Math.max(0, 20_000 - (Date.now() - outageStart)));

      assert.ok(first.alive(), `the pipeline kept retrying through the outage rather than exiting\n${describeProcess(first)}`);
      const during = await first.metrics();
      t.diagnostic(
        `after 20 s without ClickHouse: ${during.holdscope_pipeline_insert_failures_total} failed INSERTs, ${during.holdscope_pipeline_rows_pending} rows pending`,
      );
      assert.ok((during.holdscope_pipeline_insert_failures_total ?? 0) > 0, 'INSERTs failed and were retried');
      assert.ok((during.holdscope_pipeline_rows_pending ?? 0) > 0, 'the pipeline holds uncommitted rows: it dies mid-batch');

      const firstInserted = during.holdscope_pipeline_rows_inserted_total ?? 0;
      await first.kill();
      step('pipeline SIGKILLed while ClickHouse was down');
      await server.restart();
      const second = cleanup(await spawnPipeline('second', [...args, ...tuning]), (p) => p.stop());
      step('ClickHouse and the pipeline restarted');
      await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) =>
        assert.fail(`${error.message}\n${describeProcess(second)}`),
      );
      await waitForGroupCaughtUp(mock, groupId, topic);
      step('caught up');

      // The other mid-batch moment: rows ClickHouse has acknowledged whose offsets are not committed yet. Hold a
      // batch in the pipeline (ClickHouse down again), make Kafka unreachable so no commit can follow, let the
      // INSERT through, and SIGKILL the pipeline then: its successor must read those spans again and insert them
      // a second time, which must change nothing.
      await server.kill();
      add(produced, await simulate(url, 'mixed', 24, 150, 'outage-c'));
      await waitFor(
        'the second pipeline holds the new spans',
        async () => ((await second.metrics()).holdscope_pipeline_rows_pending ?? 0) > 0,
        30_000,
        () => describeProcess(second),
      );
      const secondBefore = (await second.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;
      cleanup(mock, (m) => m.allUp()); // whatever happens below, the next test gets its brokers back
      await mock.allDown();
      await server.restart();
      let secondInserted = 0;
      await waitFor(
        'ClickHouse acknowledges the held rows',
        async () => {
          const m = await second.metrics();
          secondInserted = m.holdscope_pipeline_rows_inserted_total ?? 0;
          return (m.holdscope_pipeline_rows_pending ?? 0) === 0 && secondInserted > secondBefore;
        },
        30_000,
        () => describeProcess(second),
      );
      assert.ok(second.alive(), describeProcess(second));
      await second.kill();
      await mock.allUp();
      step(`pipeline SIGKILLed after ${secondInserted - secondBefore} rows were acknowledged and before their offsets could be committed`);
      const third = cleanup(await spawnPipeline('third', [...args, ...tuning]), (p) => p.stop());

      await waitForSpans(client, database, produced.spans, 60_000).catch((error: Error) =>
        assert.fail(`${error.message}\n${describeProcess(third)}`),
      );
      await waitForGroupCaughtUp(mock, groupId, topic);
      step('all spans stored and committed');
      const thirdInserted = (await third.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;
      const inserted = firstInserted + secondInserted + thirdInserted;
      t.diagnostic(
        `span rows inserted by the three processes: ${firstInserted} + ${secondInserted} + ${thirdInserted} = ${inserted}, for ${produced.spans} spans`,
      );
      assert.ok(inserted > produced.spans, 'some spans were inserted twice (replayed after the SIGKILL)');
      await assertStoredEqualsTruth(t, server, database, produced, 60);
      step('compared with the truth');
      assert.ok(third.alive(), describeProcess(third));

      // A clean stop (SIGTERM, as on a deploy) while ClickHouse is down and a batch waits for it: the process must
      // end promptly rather than retry forever, and commit nothing it could not store.
      await server.kill();
      await simulate(url, 'mixed', 25, 50, 'outage-d');
      await waitFor(
        'the third pipeline holds spans',
        async () => ((await third.metrics()).holdscope_pipeline_rows_pending ?? 0) > 0,
        30_000,
        () => describeProcess(third),
      );
      const stopStart = Date.now();
      const ended = await third.terminate(15_000);
      assert.equal(ended, 'exit code 0', `SIGTERM during an outage ends the pipeline within 15 s\n${describeProcess(third)}`);
      step(`SIGTERM during the outage ended the pipeline in ${Date.now() - stopStart} ms`);
      assert.notDeepEqual(await partitionsBehind(mock, groupId, topic), [], 'the spans ClickHouse never got are not committed');
    },
  );

  it(
    'two processes in one group split the partitions; after one is SIGKILLed the other takes over and loses nothing',
    { timeout: 150_000 },
    async (t) => {
      const step = stopwatch(t);
      const server = cleanup(await startClickHouseServer(), (s) => s.stop());
      const client = cleanup(clickhouseClient(server.url), (c) => c.close());
      const topic = randomTopic('faults-group');
      const groupId = `g-${topic}`;
      const database = randomDatabase('faults_group');
      await mock.createTopic(topic, 6);
      await migrate(client, { database, retentionDays: 30 });
      const { url } = cleanup(await startCollector(mock, topic), (c) => c.collector.shutdown());
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
      const tuning = ['--linger-ms', '20', '--max-batch-rows', '2000', '--partitions-consumed-concurrently', '2'];

      const [a, b] = await Promise.all([spawnPipeline('a', [...args, ...tuning]), spawnPipeline('b', [...args, ...tuning])]);
      cleanup(a as PipelineProcess, (p) => p.stop());
      cleanup(b as PipelineProcess, (p) => p.stop());
      step('both members ready');
      const rowsOf = async (p: PipelineProcess) => (await p.metrics()).holdscope_pipeline_rows_inserted_total ?? 0;

      // Produce round after round until both members have inserted rows: the group has split the partitions.
      const produced: Produced = nothingProduced();
      let round = 0;
      // Rounds after the fourth are small: the split can take 30 s, and the mock keeps only ~5 MB per partition.
      const produceRound = async () => {
        round++;
        const requests = round <= 4 ? 150 : 40;
        add(produced, await simulate(url, round % 4 === 0 ? 'late-write-bug' : 'mixed', 300 + round, requests, `group-r${round}`));
      };
      const splitDeadline = Date.now() + 60_000;
      do {
        await produceRound();
        await sleep(500);
        if (Date.now() > splitDeadline)
          assert.fail(`the two members never both inserted rows\n${describeProcess(a)}\n${describeProcess(b)}`);
      } while ((await rowsOf(a)) === 0 || (await rowsOf(b)) === 0 || round < 4);
      const beforeKill = { a: await rowsOf(a), b: await rowsOf(b) };
      step(`before the kill: ${produced.spans} spans in ${round} rounds; a inserted ${beforeKill.a} rows, b ${beforeKill.b}`);
      assert.ok(beforeKill.a > 0 && beforeKill.b > 0, 'both members inserted rows');

      // SIGKILL b while spans are still flowing, then keep producing: b's partitions get data only a can read,
      // once the group notices b is gone (after the session timeout) and hands them over.
      const inFlight = produceRound();
      await sleep(300);
      const bAtKill = await b.metrics();
      await b.kill();
      await inFlight;
      step(
        `b SIGKILLed holding ${bAtKill.holdscope_pipeline_rows_pending ?? 0} rows not yet acknowledged, after inserting ${bAtKill.holdscope_pipeline_rows_inserted_total ?? 0}`,
      );
      const spansAtKill = produced.spans;
      for (let i = 0; i < 4; i++) await produceRound();
      step(`${produced.spans - spansAtKill} spans produced after the kill`);

      await assertMockKeptEveryMessage(mock, topic);
      await waitForSpans(client, database, produced.spans, 90_000).catch((error: Error) =>
        assert.fail(`${error.message}\n${describeProcess(a)}`),
      );
      await waitForGroupCaughtUp(mock, groupId, topic);
      step('all spans stored and committed');
      assert.ok(a.alive(), describeProcess(a));
      const survivorRows = (await rowsOf(a)) - beforeKill.a;
      t.diagnostic(
        `the survivor inserted ${survivorRows} rows after the kill; ${beforeKill.a + survivorRows + (bAtKill.holdscope_pipeline_rows_inserted_total ?? 0)} rows in all for ${produced.spans} spans`,
      );
      assert.ok(survivorRows >= produced.spans - spansAtKill, 'the survivor inserted at least everything produced after the kill');
      await assertStoredEqualsTruth(t, server, database, produced, 60);
      step('compared with the truth');
    },
  );
});
