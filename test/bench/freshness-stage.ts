/**
 * The bench's freshness stage: a collector, a pipeline process and the read API on a topic and database of their
 * own, fed captured simulator requests at a fixed rate, with probe spans timed from export to visibility.
 */
import { Collector, collectorConfigSchema } from '../../collector/index.ts';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { quietLog } from '../support/stack.ts';
import { buildWorkload, measureFreshness, percentile, type FreshnessResult } from './freshness.ts';
import { spawnPipeline } from './pipeline-process.ts';
import { progress, stage } from './report.ts';

export interface FreshnessStageResult extends FreshnessResult {
  p50Ms: number;
  p99Ms: number;
}

export async function runFreshnessStage(options: {
  /** Names the stage's topic, database and request ids: unique per run and per stage. */
  name: string;
  label: string;
  brokers: string[];
  createTopic: (topic: string, partitions: number) => Promise<void>;
  clickhouseUrl: string;
  client: ClickHouseClient;
  rate: number;
  seconds: number;
  /** How long a probe may stay unseen before it counts as never seen. */
  probeTimeoutMs: number;
}): Promise<FreshnessStageResult> {
  const { label, rate } = options;
  const topic = `bench-${options.name}`;
  const database = `bench_${options.name.replaceAll('-', '_')}`;
  await options.createTopic(topic, 12);
  stage(label);
  const workload = await buildWorkload({
    rate,
    seconds: options.seconds,
    probeEvery: Math.max(1, Math.round(rate / 256 / 4)),
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
  const collectorPort = await collector.start();
  const pipeline = await spawnPipeline([
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
  ]);
  const api = await startHttpServer({ port: 0, host: '127.0.0.1', client: options.client, database, log: quietLog });
  try {
    // The group's first join takes seconds on the mock: wait until a first request is visible before timing.
    const warmUp = workload.bodies[workload.bodies.length - 1];
    if (warmUp)
      await fetch(`http://127.0.0.1:${collectorPort}/v1/traces`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-protobuf' },
        body: warmUp.body,
      });
    for (let i = 0; i < 300 && ((await pipeline.metrics()).holdscope_pipeline_rows_inserted_total ?? 0) === 0; i++)
      await new Promise((r) => setTimeout(r, 100));
    stage(`${label}: pipeline ready, measuring`);
    const result = await measureFreshness({
      workload,
      rate,
      collectorUrl: `http://127.0.0.1:${collectorPort}`,
      readApiUrl: `http://127.0.0.1:${api.port}`,
      pollMs: 100,
      timeoutMs: options.probeTimeoutMs,
      onProgress: (sent, samples) => progress(`${label}: ${sent} spans sent, ${samples} probes seen`),
    });
    return { ...result, p50Ms: percentile(result.samplesMs, 50), p99Ms: percentile(result.samplesMs, 99) };
  } finally {
    stage(`${label}: stopping`);
    await api.close();
    await pipeline.stop();
    await collector.shutdown();
    // Its records are not read again, and their merges would share the cores with the stages after it.
    await options.client.command({ query: 'DROP DATABASE IF EXISTS {db:Identifier}', query_params: { db: database } });
  }
}
