/**
 * `npm run bench [-- --quick]`: holdscope's throughput, freshness, query latency and memory, measured in one run
 * on one broker (librdkafka's mock cluster) and one ClickHouse server (chdb serving HTTP), so the ratios hold on a
 * noisy shared machine. Prints a table, then one JSON object as the last line. Stages: 1-2 the ceiling and the
 * pipeline draining one backlog (5, its memory); 3 freshness and violation-alert latency at the offered load, and at
 * half of it in the full run; 4 the pages' requests over a large dataset, and the on-call questions over the same spans
 * stored as the OpenTelemetry Collector's ClickHouse exporter stores them; 5 the same backlog and the pages' requests on a
 * 2-shard cluster against the single server.
 */
import { Command } from 'commander';
import { createHash } from 'node:crypto';
import os from 'node:os';
import { migrate } from '../../pipeline/index.ts';
import { createClickHouse } from '../../common/index.ts';
import { startClickHouseServer } from '../support/clickhouse-server.ts';
import { kafkaForTests, startKafkaMock } from '../support/kafka-mock.ts';
import { produceBacklog } from './backlog.ts';
import { preSerialize, runCeiling } from './ceiling.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { quietLog } from '../support/stack.ts';
import { PROBE_POLL_MS, runFreshnessStage, type FreshnessStageResult } from './freshness-stage.ts';
import { buildQueryDataset, PAGE_WARM_UPS, settleMerges, timePageRequests } from './page-queries.ts';
import { drainThroughPipeline, PIPELINE_HEAP_MB, setPipelineFlags } from './pipeline-process.ts';
import { FigureSheet, progress, report, stage } from './report.ts';
import { timeGenericStack } from './generic-stack.ts';
import { runClusterStage } from './cluster-stage.ts';
import { clickhouseCpuShares, describeCpuShares, describeShare } from './clickhouse-cpu.ts';
import { writeQueryLogConfig } from '../support/clickhouse-logs.ts';

const program = new Command('bench')
  .option('--quick', 'a smaller run, under 2 minutes')
  .option('--spans <n>', 'backlog drained by the ceiling and the pipeline (default 1,000,000; quick 100,000)')
  .option('--lifecycles <n>', 'lifecycles in the query dataset (default 10,000,000; quick 50,000)')
  .option('--rate <spansPerSecond>', 'offered load of the freshness run (default 20,000; quick 5,000)')
  .option('--freshness-seconds <s>', 'length of the freshness run (default 60; quick 10)')
  .option('--no-half-load', 'skip the second freshness run at half the offered load (the quick run always does)')
  .option('--runs <n>', `times each page request is timed, after ${PAGE_WARM_UPS} untimed (default 20; quick 5)`)
  .option('--no-cluster', 'skip the cluster stage: the backlog and the pages on 2 shards against the single server')
  .option('--partitions <n>', 'partitions of the backlog topic (default: enough for the mock broker, which keeps ~5 MB per partition)')
  .option('--random-ids', "the freshness load's request ids random (cmpl-<32 hex>, as vLLM's), not in arrival order")
  .option('--pipeline-flags <flags>', 'flags added to every pipeline process, e.g. "--linger-ms 500" (to compare a setting)')
  .option(
    '--clickhouse-cpu',
    "also split ClickHouse's CPU during the freshness load by statement kind, merged table and materialized view (its logs cost it ~0.02 cores)",
  )
  .parse();
const opts = program.opts<{
  quick?: boolean;
  halfLoad: boolean;
  cluster: boolean;
  spans?: string;
  lifecycles?: string;
  rate?: string;
  freshnessSeconds?: string;
  runs?: string;
  partitions?: string;
  clickhouseCpu?: boolean;
  pipelineFlags?: string;
  randomIds?: boolean;
}>();
const pipelineFlags = (opts.pipelineFlags ?? '').split(/\s+/).filter(Boolean);
setPipelineFlags(pipelineFlags);
const quick = opts.quick === true;
/** The flags that change what the run measures, named in its report. */
const runFlags = [quick && '--quick', opts.randomIds && '--random-ids'].filter((f): f is string => typeof f === 'string');
const settings = {
  spans: Number(opts.spans ?? (quick ? 100_000 : 1_000_000)),
  lifecycles: Number(opts.lifecycles ?? (quick ? 50_000 : 10_000_000)),
  rate: Number(opts.rate ?? (quick ? 5_000 : 20_000)),
  freshnessSeconds: Number(opts.freshnessSeconds ?? (quick ? 10 : 60)),
  partitions: 0,
};
/** A second freshness run at half the load (about 80 s): the full run only. */
const halfLoad = opts.halfLoad && !quick;
// About 540 bytes per span in the collector's messages, and the simulator overshoots the spans asked for by up to
// 15 % (114,401 for 100,000): 620 bytes per span asked. 3.5 MB a partition on average leaves the mock's 5 MB room for
// the key hash's skew (at 520 bytes, 4.1 MB on average, one partition of 15 went over once).
settings.partitions = Number(opts.partitions ?? Math.max(12, Math.ceil((settings.spans * 620) / 3.5e6)));
for (const [key, value] of Object.entries(settings))
  if (!Number.isFinite(value) || value <= 0) program.error(`--${key}: expected a positive number, got ${value}`);

/** A violation probe whose alert Alertmanager has not accepted this long after the collector did counts as never alerted. */
const ALERT_TIMEOUT_MS = 30_000;
const figures = new FigureSheet();
const started = Date.now();
const mock = await startKafkaMock({ brokers: 3 });
const server = await startClickHouseServer(opts.clickhouseCpu ? { configFile: writeQueryLogConfig() } : {});
// Building the query dataset runs single statements for minutes: a generous timeout.
const client = await createClickHouse({ url: server.url, dataPath: '', requestTimeoutMs: 60 * 60_000 });
const kafka = kafkaForTests(mock.brokers, 'holdscope-bench');
/** Waits (at most `minutes`) until ClickHouse runs no background merge, and reports how long that took as `name`. */
async function waitForMerges(whose: string, name: string, when: string, minutes: number) {
  stage(`waiting for ${whose} background merges`);
  const merges = await settleMerges(client, {
    timeoutMs: minutes * 60_000,
    onProgress: (n) => progress(`background merges: ${n} running`),
  });
  const tables = merges.tablesAtStart.length ? ` (${merges.tablesAtStart.join(', ')})` : '';
  figures.add({
    name,
    value: Math.round(merges.seconds),
    unit: 's',
    note: `${merges.mergesAtStart} merges running ${when}${tables}${merges.settled ? '' : '; still merging when the wait gave up'}`,
  });
  return merges;
}
const run = createHash('sha1').update(String(started)).digest('hex').slice(0, 6);
try {
  // 1–2, 5: one backlog, drained by the ceiling and then by the pipeline.
  const topic = `bench-backlog-${run}`;
  await mock.createTopic(topic, settings.partitions);
  stage('producing the backlog');
  const backlog = await produceBacklog({
    kafka,
    topic,
    spans: settings.spans,
    seed: 7,
    idPrefix: `b${run}`,
    startTimeMs: Date.now() - 3_600_000,
    onProgress: (n) => progress(`producing the backlog: ${n} spans`),
  });
  figures.add({
    name: 'backlog',
    value: backlog.spans,
    unit: 'spans',
    note: `${backlog.lifecycles} lifecycles, ${backlog.messages} messages (${(backlog.bytes / 2 ** 20).toFixed(0)} MiB) in ${settings.partitions} partitions`,
  });
  stage('serializing the backlog ahead of time');
  const prepared = await preSerialize(kafka, topic);
  if (prepared.rows !== backlog.spans) throw new Error(`pre-serialized ${prepared.rows} rows for ${backlog.spans} spans`);

  const ceilingDb = `bench_ceiling_${run}`;
  await migrate(client, { database: ceilingDb, retentionDays: 30 });
  stage('ceiling');
  const ceiling = await runCeiling({
    kafka,
    topic,
    client,
    database: ceilingDb,
    prepared: prepared.byOffset,
    expectedRows: prepared.rows,
    onProgress: (n) => progress(`ceiling: ${n} rows`),
  });
  prepared.byOffset.clear();
  figures.add({
    name: 'ceiling',
    value: Math.round(ceiling.spansPerSecond),
    unit: 'spans/s',
    note: `kafkajs + INSERT of pre-serialized rows, ${ceiling.seconds.toFixed(2)} s`,
  });

  const pipelineDb = `bench_pipeline_${run}`;
  stage('pipeline draining the backlog');
  const drained = await drainThroughPipeline(
    [
      '--kafka-brokers',
      mock.brokers.join(','),
      '--topics',
      topic,
      '--group-id',
      `pipeline-${topic}`,
      '--clickhouse-url',
      server.url,
      '--database',
      pipelineDb,
    ],
    backlog.spans,
    (n) => progress(`pipeline: ${n} rows`),
  );
  const ratio = drained.spansPerSecond / ceiling.spansPerSecond;
  figures.add({
    name: 'pipeline',
    value: Math.round(drained.spansPerSecond),
    unit: 'spans/s',
    note: `holdscope pipeline process, ${drained.seconds.toFixed(2)} s`,
  });
  figures.add({ name: 'ratio', value: Number(ratio.toFixed(3)), unit: '', goal: '>= 0.7', ok: ratio >= 0.7 });
  figures.add({
    name: 'peak RSS',
    value: Math.round(drained.peakRssMiB),
    unit: 'MiB',
    note: `pipeline draining ${backlog.spans} spans, NODE_OPTIONS=--max-old-space-size=${PIPELINE_HEAP_MB}`,
    goal: '< 400',
    ok: drained.peakRssMiB < 400,
  });

  await client.command({ query: `DROP DATABASE IF EXISTS ${ceilingDb}` });

  // 3: freshness at a fixed offered load, collector → Kafka → pipeline process → ClickHouse → read API; then, in the
  // full run, at half that load: what the goal's load costs in freshness against what a host below saturation gives.
  const freshnessAt = (name: string, label: string, rate: number) =>
    runFreshnessStage({
      name: `${name}-${run}`,
      label,
      brokers: mock.brokers,
      createTopic: (topic, partitions) => mock.createTopic(topic, partitions),
      clickhouseUrl: server.url,
      clickhousePid: server.pid,
      client,
      rate,
      seconds: settings.freshnessSeconds,
      requestIds: opts.randomIds ? 'random' : 'sequential',
      probeTimeoutMs: quick ? 20_000 : 60_000,
      alertTimeoutMs: ALERT_TIMEOUT_MS,
    });
  // The backlog just drained into pipelineDb (890,000 spans in half a minute) leaves merges a live table at this load
  // does not carry; the freshness stage's own table merges as it goes, as a live one would.
  const drainMerges = await waitForMerges("the drained backlog's", 'merges settled (before freshness)', 'after the drain', quick ? 1 : 5);
  const fresh = await freshnessAt('fresh', 'freshness', settings.rate);
  /** Where a freshness stage's alert time went: to the record's computed_at, then to the 2xx, and the means of the parts. */
  const whereAlertTimeWent = (a: FreshnessStageResult['alerts']) =>
    `its record computed (computed_at) after p50 ${Math.round(a.recordP50Ms)} / p99 ${Math.round(a.recordP99Ms)} ms, from there to the 2xx ` +
    `p50 ${Math.round(a.pushP50Ms)} / p99 ${Math.round(a.pushP99Ms)} ms; on average a record refresh took ${Math.round(a.refreshMeanMs)} ms, ` +
    `a lookup of the incidents ${Math.round(a.lookupMeanMs)} ms and a POST to Alertmanager ${Math.round(a.postMeanMs)} ms`;
  /** How busy the host was from the load's start until its probes were answered, in % (the figure and the JSON). */
  const busyPct = ({ cpu }: FreshnessStageResult) => Math.round(cpu.hostBusy * 100);
  /** Over the same interval, who took the cores. */
  const cpuNote = ({ cpu }: FreshnessStageResult) =>
    `of ${cpu.cores} cores from the load's start until its probes were answered: ` +
    Object.entries(cpu.processCores)
      .map(([name, cores]) => `${name} ${cores.toFixed(2)}`)
      .join(', ');
  const unseenNote = (r: FreshnessStageResult) => (r.unseen > 0 ? `${r.unseen} probes never seen within ${quick ? 20 : 60} s` : undefined);
  figures.add({
    name: 'offered load',
    value: Math.round(fresh.offeredSpansPerSecond),
    unit: 'spans/s',
    note: `target ${settings.rate} for ${settings.freshnessSeconds} s; ${fresh.rejected} requests refused or failed and retried`,
  });
  figures.add({ name: 'host CPU busy', value: busyPct(fresh), unit: '%', note: cpuNote(fresh) });
  if (opts.clickhouseCpu) {
    const { statements, views } = await clickhouseCpuShares(client, fresh.cpu.fromMs, fresh.cpu.toMs);
    const cores = fresh.cpu.processCores.clickhouse ?? NaN;
    figures.add({ name: '  ClickHouse cores', value: Number(cores.toFixed(2)), unit: 'cores', note: describeCpuShares(statements, cores) });
    const inViews = views.reduce((n, v) => n + v.cores, 0);
    figures.add({
      name: '    of which materialized views',
      value: Number(inViews.toFixed(2)),
      unit: 'cores',
      note: views.map(describeShare).join(', '),
    });
  }
  figures.add({
    name: 'freshness p50',
    value: Math.round(fresh.p50Ms),
    unit: 'ms',
    note: `export → lifecycle visible in the read API, ${fresh.samplesMs.length} probes polled every ${PROBE_POLL_MS} ms`,
  });
  figures.add({
    name: 'freshness p99',
    value: Math.round(fresh.p99Ms),
    unit: 'ms',
    goal: '< 2000',
    ok: fresh.p99Ms < 2000 && fresh.unseen === 0,
    note: unseenNote(fresh),
  });
  figures.add({
    name: 'violation alert p50',
    value: Math.round(fresh.alerts.p50Ms),
    unit: 'ms',
    note:
      `collector's 200 for a span completing a violation → Alertmanager's 2xx for its alert (pushed by the pipeline), ` +
      `${fresh.alerts.samplesMs.length} of ${fresh.alerts.sent} probes spread evenly over the load; ${whereAlertTimeWent(fresh.alerts)}`,
  });
  figures.add({
    name: 'violation alert p99',
    value: Math.round(fresh.alerts.p99Ms),
    unit: 'ms',
    goal: '< 2000',
    ok: fresh.alerts.p99Ms < 2000 && fresh.alerts.unalerted === 0,
    note:
      `slowest ${Math.round(fresh.alerts.maxMs)} ms` +
      (fresh.alerts.unalerted > 0 ? `; ${fresh.alerts.unalerted} probes never alerted within ${ALERT_TIMEOUT_MS / 1000} s` : ''),
  });
  let half: FreshnessStageResult | undefined;
  if (halfLoad) {
    half = await freshnessAt('fresh-half', 'freshness at half the load', Math.round(settings.rate / 2));
    figures.add({
      name: '  at half the load: offered',
      value: Math.round(half.offeredSpansPerSecond),
      unit: 'spans/s',
      note: `${half.rejected} requests refused or failed and retried`,
    });
    figures.add({ name: '  at half the load: host CPU busy', value: busyPct(half), unit: '%', note: cpuNote(half) });
    figures.add({
      name: '  at half the load: freshness p99',
      value: Math.round(half.p99Ms),
      unit: 'ms',
      note: unseenNote(half) ?? `p50 ${Math.round(half.p50Ms)} ms, ${half.samplesMs.length} probes`,
    });
    figures.add({
      name: '  at half the load: violation alert p99',
      value: Math.round(half.alerts.p99Ms),
      unit: 'ms',
      note: `p50 ${Math.round(half.alerts.p50Ms)} ms, slowest ${Math.round(half.alerts.maxMs)} ms, ${half.alerts.samplesMs.length} of ${half.alerts.sent} probes alerted; ${whereAlertTimeWent(half.alerts)}`,
    });
  }

  // 4: the pages' queries over a large dataset.
  const queryDb = `bench_queries_${run}`;
  const endMs = Date.now();
  stage('building the query dataset');
  const dataset = await buildQueryDataset({
    client,
    templateDb: pipelineDb,
    database: queryDb,
    lifecycles: settings.lifecycles,
    endMs,
    onProgress: (n) => progress(`query dataset: ${n} lifecycles`),
  });
  figures.add({
    name: 'query dataset',
    value: dataset.lifecycles,
    unit: 'lifecycles',
    note: `${dataset.spans} spans over ${dataset.hours.toFixed(1)} h ending now, built in ${dataset.seconds.toFixed(0)} s`,
  });
  const merges = await waitForMerges("the dataset's", 'merges settled', 'when the load ended', quick ? 1 : 15);
  const queryApi = await startHttpServer({ port: 0, host: '127.0.0.1', client, database: queryDb, log: quietLog });
  let latencies;
  try {
    const idRows = await (
      await client.query({
        query: `SELECT request_id FROM ${queryDb}.spans WHERE name = 'pd.release' AND start_time >= {from:DateTime64(9)} LIMIT 1`,
        format: 'JSONEachRow',
        query_params: { from: new Date(endMs - 3_600_000).toISOString().replace('T', ' ').replace('Z', '') },
      })
    ).json<{ request_id: string }>();
    stage("timing the pages' requests");
    if (!idRows[0]) throw new Error('the query dataset has no release in its last hour');
    latencies = await timePageRequests({
      apiUrl: `http://127.0.0.1:${queryApi.port}`,
      from: new Date(endMs - 3_600_000).toISOString(),
      to: new Date(endMs).toISOString(),
      requestId: idRows[0].request_id,
      runs: Number(opts.runs ?? (quick ? 5 : 20)),
      warmUps: PAGE_WARM_UPS,
      onProgress: (n) => progress(`page requests: ${n} made`),
    });
  } finally {
    await queryApi.close();
  }
  for (const l of latencies)
    figures.add({
      name: `  ${l.page} ${l.path}`,
      value: Math.round(l.p95Ms),
      unit: 'ms p95',
      note: `p50 ${Math.round(l.p50Ms)} ms, ${l.runs} runs after ${PAGE_WARM_UPS} untimed (${l.untimedMs.map((ms) => Math.round(ms)).join(', ')} ms)`,
    });
  const queryP95 = Math.max(...latencies.filter((l) => l.page === 'on-call').map((l) => l.p95Ms));
  figures.add({
    name: 'query p95',
    value: Math.round(queryP95),
    unit: 'ms',
    goal: '< 250',
    ok: queryP95 < 250,
    note: 'slowest request of the on-call page, last hour',
  });

  // 4b: the same questions over the same spans, stored as the OpenTelemetry Collector's ClickHouse exporter stores them.
  stage('the generic stack: otel_traces side by side');
  const generic = await timeGenericStack({
    client,
    database: queryDb,
    from: new Date(endMs - 3_600_000).toISOString(),
    to: new Date(endMs).toISOString(),
    // A generic question takes seconds at the pages' density (1.8-26 s p95 at 875,000 lifecycles an hour, 13-144 times
    // holdscope's): 5 runs after one untimed put each ratio well within its own size, where 20 would take 40 min.
    runs: Math.min(5, Number(opts.runs ?? 5)),
    warmUps: 1,
    mergeTimeoutMs: (quick ? 1 : 15) * 60_000,
    onProgress: (n) => progress(`generic stack: ${n} runs`),
  });
  for (const f of generic.figures) figures.add({ ...f, name: `  ${f.name}` });

  // 5: the same backlog and page on 2 shards against the single server (test/bench/cluster-stage.ts). A cluster that
  // fails (chdb aborts beyond what the watchdog mends) costs this stage's figures, not the run's.
  let clusterJson: Record<string, number | null> = {};
  if (opts.cluster) {
    try {
      clusterJson = await runClusterStage({
        run,
        brokers: mock.brokers,
        backlogTopic: topic,
        backlogSpans: backlog.spans,
        singleNode: { client, templateDb: pipelineDb, pipelineSpansPerSecond: drained.spansPerSecond },
        lifecycles: Math.min(settings.lifecycles, quick ? 50_000 : 1_000_000),
        runs: Number(opts.runs ?? (quick ? 5 : 20)),
        quick,
        figures,
      });
    } catch (error) {
      stage(`cluster stage failed: ${(error as Error).message.split('\n')[0]}`);
      clusterJson = { cluster_pipeline_spans_per_s: null, cluster_query_p95_ms: null };
    }
  }

  report(figures.all(), {
    machine: `${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node.js ${process.version}`,
    command: `npm run bench${runFlags.length > 0 ? ` -- ${runFlags.join(' ')}` : ''}${pipelineFlags.length > 0 ? ` (pipeline: ${pipelineFlags.join(' ')})` : ''}`,
    seconds: (Date.now() - started) / 1000,
    json: {
      pipeline_spans_per_s: Math.round(drained.spansPerSecond),
      ceiling_spans_per_s: Math.round(ceiling.spansPerSecond),
      ratio: Number(ratio.toFixed(3)),
      rss_mb: Math.round(drained.peakRssMiB),
      freshness_p50_ms: Math.round(fresh.p50Ms),
      freshness_p99_ms: Math.round(fresh.p99Ms),
      offered_spans_per_s: Math.round(fresh.offeredSpansPerSecond),
      host_cpu_busy_pct: busyPct(fresh),
      violation_alert_p50_ms: Math.round(fresh.alerts.p50Ms),
      violation_alert_p99_ms: Math.round(fresh.alerts.p99Ms),
      violation_alert_max_ms: Math.round(fresh.alerts.maxMs),
      violation_alert_probes: fresh.alerts.sent,
      violation_alert_probes_unalerted: fresh.alerts.unalerted,
      violation_alert_record_p99_ms: Math.round(fresh.alerts.recordP99Ms),
      violation_alert_push_p99_ms: Math.round(fresh.alerts.pushP99Ms),
      violation_alert_lookup_mean_ms: Math.round(fresh.alerts.lookupMeanMs),
      ...(half
        ? {
            half_load_offered_spans_per_s: Math.round(half.offeredSpansPerSecond),
            half_load_host_cpu_busy_pct: busyPct(half),
            half_load_freshness_p99_ms: Math.round(half.p99Ms),
            half_load_violation_alert_p99_ms: Math.round(half.alerts.p99Ms),
            half_load_violation_alert_max_ms: Math.round(half.alerts.maxMs),
            half_load_violation_alert_record_p99_ms: Math.round(half.alerts.recordP99Ms),
            half_load_violation_alert_push_p99_ms: Math.round(half.alerts.pushP99Ms),
          }
        : {}),
      query_p95_ms: Math.round(queryP95),
      // Issue 27's reads over the same hour: the advice section, and the slower of the Compare view's two requests.
      advice_p95_ms: Math.round(Math.max(...latencies.filter((l) => l.path === '/api/advice').map((l) => l.p95Ms))),
      compare_p95_ms: Math.round(Math.max(...latencies.filter((l) => l.page === 'compare').map((l) => l.p95Ms))),
      query_lifecycles: dataset.lifecycles,
      merges_settled_s: Math.round(merges.seconds),
      merges_settled_before_freshness_s: Math.round(drainMerges.seconds),
      ...generic.json,
      ...clusterJson,
    },
  });
} finally {
  await client.close();
  await server.stop();
  await mock.stop();
}
