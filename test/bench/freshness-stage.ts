/**
 * The bench's freshness stage: a collector, a pipeline process and the read API on a topic and database of their
 * own, fed captured simulator requests at a fixed rate, with probe spans timed from export to visibility; and the
 * pipeline pushing its violation alerts to a real Alertmanager, with violation probes (ALERT_PROBE_EVERY_MS) timed
 * from the collector's answer to Alertmanager's.
 */
import os from 'node:os';
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import type { SimConfig } from '../../emitter/index.ts';
import { quietLog } from '../support/stack.ts';
import type { PipelineProcess } from '../support/pipeline-process.ts';
import { cpuBetween, snapshotCpu, type CpuUsage } from './cpu-usage.ts';
import { buildWorkload, measureFreshness, percentile, type FreshnessResult, type Workload } from './freshness.ts';
import { spawnPipeline } from './pipeline-process.ts';
import { progress, stage } from './report.ts';
import {
  buildViolationProbes,
  recordComputedAfterMs,
  sendViolationProbes,
  startAlertReceiver,
  type AlertReceiver,
  type ViolationAlertResult,
} from './violation-alerts.ts';

export interface FreshnessStageResult extends FreshnessResult {
  p50Ms: number;
  p99Ms: number;
  /**
   * From the load's start until its probes were answered (a saturated run's draining tail included): the host's busy
   * share, and the cores of ClickHouse, the pipeline and this process (load generator, collector, prober).
   */
  cpu: CpuUsage;
  alerts: ViolationAlertResult & {
    p50Ms: number;
    p99Ms: number;
    /** The slowest probe (NaN when none was alerted, as the percentiles). */
    maxMs: number;
    /** Collector's 200 → the probe's flagged record computed (its computed_at, as its INSERT began). */
    recordP50Ms: number;
    recordP99Ms: number;
    /** That computed_at → Alertmanager's 2xx for its alert: the INSERT, then the push's lookup, queue and POST. */
    pushP50Ms: number;
    pushP99Ms: number;
    /** The pipeline's mean record refresh (the INSERT the nudge waits for), lookup and POST to Alertmanager, over the stage. */
    refreshMeanMs: number;
    lookupMeanMs: number;
    postMeanMs: number;
  };
}

/**
 * Four violation probes a second, 240 over the minute: the p99 is then the 238th of them. Of one a second's 60 it was
 * the slowest, which one probe decided (two runs of the same code: 1,694 and 2,115 ms). Still a load the push barely
 * notices: a new incident, and so a new alert, every 250 ms.
 */
const ALERT_PROBE_EVERY_MS = 250;

/**
 * How often the prober reads the progress of the freshness probes not yet seen. Each read costs ClickHouse 15-20 ms
 * (the lifecycles view's planning); every 100 ms that was the bench's own load on the host it measures, enough to
 * move the alert p99 (host 94 % against 86 % busy in two runs side by side). A probe is seen up to this late.
 */
export const PROBE_POLL_MS = 200;

export async function runFreshnessStage(options: {
  /** Names the stage's topic, database and request ids: unique per run and per stage. */
  name: string;
  label: string;
  brokers: string[];
  createTopic: (topic: string, partitions: number) => Promise<void>;
  clickhouseUrl: string;
  /** The ClickHouse server's process, whose CPU is reported beside the pipeline's. */
  clickhousePid: number;
  client: ClickHouseClient;
  rate: number;
  seconds: number;
  requestIds: NonNullable<SimConfig['requestIds']>;
  /** How long a probe may stay unseen before it counts as never seen. */
  probeTimeoutMs: number;
  /** How long a violation probe may go without its alert accepted before it counts as never alerted. */
  alertTimeoutMs: number;
}): Promise<FreshnessStageResult> {
  const { label, rate } = options;
  const topic = `bench-${options.name}`;
  const database = `bench_${options.name.replaceAll('-', '_')}`;
  await options.createTopic(topic, 12);
  stage(label);
  const workload = await buildWorkload({
    rate,
    seconds: options.seconds,
    requestIds: options.requestIds,
    probeEvery: Math.max(1, Math.round(rate / 256 / 4)),
    idPrefix: options.name,
    startTimeMs: Date.now(),
  });
  const violationProbes = await buildViolationProbes({
    count: Math.max(1, Math.floor((options.seconds * 1000) / ALERT_PROBE_EVERY_MS)),
    everyMs: ALERT_PROBE_EVERY_MS,
    idPrefix: options.name,
    startTimeMs: Date.now(),
  });
  stage(`${label}: workload ready`);
  const collector = new Collector(
    collectorConfigSchema.parse({
      port: 0,
      host: '127.0.0.1',
      kafkaBrokers: options.brokers.join(','),
      topic,
      deadLetterTopic: `${topic}-dlq`,
    }),
    { log: quietLog },
  );
  const collectorUrl = `http://127.0.0.1:${await collector.start()}`;
  let alertReceiver: AlertReceiver | undefined;
  let pipeline: PipelineProcess | undefined;
  let api: { port: number; close(): Promise<void> } | undefined;
  try {
    alertReceiver = await startAlertReceiver();
    pipeline = await spawnPipeline([
      '--kafka-brokers',
      options.brokers.join(','),
      '--topics',
      topic,
      '--group-id',
      `pipeline-${topic}`,
      '--clickhouse-url',
      options.clickhouseUrl,
      '--database',
      database,
      '--alertmanager-url',
      alertReceiver.url,
    ]);
    api = await startHttpServer({ port: 0, host: '127.0.0.1', client: options.client, database, log: quietLog });
    await warmUp(pipeline, collectorUrl, workload);
    stage(`${label}: pipeline ready, measuring`);
    // The violation probes go through the same collector, interleaved with the load, from the same moment.
    const pids = { clickhouse: options.clickhousePid, pipeline: pipeline.pid, 'bench (load, collector, prober)': process.pid };
    const cpuBefore = snapshotCpu(pids);
    const [result, alerts] = await Promise.all([
      measureFreshness({
        workload,
        rate,
        collectorUrl,
        readApiUrl: `http://127.0.0.1:${api.port}`,
        pollMs: PROBE_POLL_MS,
        timeoutMs: options.probeTimeoutMs,
        onProgress: (sent, samples) => progress(`${label}: ${sent} spans sent, ${samples} probes seen`),
      }),
      sendViolationProbes({
        probes: violationProbes,
        collectorUrl,
        receiver: alertReceiver,
        everyMs: ALERT_PROBE_EVERY_MS,
        timeoutMs: options.alertTimeoutMs,
      }),
    ]);
    const cpu = cpuBetween(cpuBefore, snapshotCpu(pids), os.availableParallelism());
    const recordMs = await recordComputedAfterMs(options.client, database, alerts.acceptedAtMs);
    const m = await pipeline.metrics();
    const meanMs = (name: string) => ((m[`${name}_sum`] ?? NaN) / (m[`${name}_count`] ?? NaN)) * 1000;
    // Per probe: the record computed → Alertmanager's 2xx (the INSERT, then the push's lookup, queue and POST).
    const pushMs = [...alerts.alertedAfterMs].map(([id, ms]) => ms - (recordMs.get(id) ?? NaN)).filter(Number.isFinite);
    return {
      ...result,
      cpu,
      p50Ms: percentile(result.samplesMs, 50),
      p99Ms: percentile(result.samplesMs, 99),
      alerts: {
        ...alerts,
        p50Ms: percentile(alerts.samplesMs, 50),
        p99Ms: percentile(alerts.samplesMs, 99),
        maxMs: percentile(alerts.samplesMs, 100),
        recordP50Ms: percentile([...recordMs.values()], 50),
        recordP99Ms: percentile([...recordMs.values()], 99),
        pushP50Ms: percentile(pushMs, 50),
        pushP99Ms: percentile(pushMs, 99),
        refreshMeanMs: meanMs('holdscope_pipeline_record_refresh_duration_seconds'),
        postMeanMs: meanMs('holdscope_violation_alert_push_seconds'),
        lookupMeanMs: meanMs('holdscope_violation_lookup_seconds'),
      },
    };
  } finally {
    stage(`${label}: stopping`);
    await api?.close();
    await pipeline?.stop();
    await alertReceiver?.stop();
    await collector.shutdown();
    // Its records are not read again, and their merges would share the cores with the stages after it.
    await options.client.command({ query: 'DROP DATABASE IF EXISTS {db:Identifier}', query_params: { db: database } });
  }
}

/** The group's first join takes seconds on the mock: one request, and a wait until its rows are stored, before timing. */
async function warmUp(pipeline: PipelineProcess, collectorUrl: string, workload: Workload): Promise<void> {
  const first = workload.bodies[workload.bodies.length - 1];
  if (first)
    await fetch(`${collectorUrl}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-protobuf' },
      body: first.body,
    });
  for (let i = 0; i < 300 && ((await pipeline.metrics()).holdscope_pipeline_rows_inserted_total ?? 0) === 0; i++)
    await new Promise((r) => setTimeout(r, 100));
}
