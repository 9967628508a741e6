/**
 * The bench's cluster stage: the backlog of stages 1-2 drained again, and the on-call page timed again, on a 2-shard x
 * 1-replica ClickHouse cluster (chdb servers, test/support/clickhouse-cluster.ts, its schema created node by node),
 * against the single server of the stages before.
 *
 * Both shards run on this machine's cores beside each other, the pipeline, the broker and the read API: on 2 cores
 * the stage measures what sharding costs (the Distributed tables, a second hop for the rows and reads of the other
 * shard, each query's fan-out and merge), not what it gains where each shard has cores of its own. chdb's server
 * aborts now and then while it opens a session for the other node's connection: a watchdog restarts the node, a read
 * or a build it cut short is done again once the node is back, and the figures say how many restarts there were.
 */
import os from 'node:os';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { migrateStorage, storageConfigSchema } from '../../pipeline/index.ts';
import { startClickHouseCluster, type ClickHouseCluster } from '../support/clickhouse-cluster.ts';
import { checkDespiteAborts, watchNodes, type NodeWatchdog } from '../support/cluster-checks.ts';
import { quietLog } from '../support/stack.ts';
import { buildQueryDataset, PAGE_WARM_UPS, settleMerges, timePageRequests, type EndpointLatency } from './page-queries.ts';
import { drainThroughPipeline } from './pipeline-process.ts';
import { progress, stage, type FigureSheet } from './report.ts';

/**
 * max_server_memory_usage of each node. By this stage the single server holds stage 4's 10 M-lifecycle dataset (about
 * 2.6 GiB resident), the broker the backlog (0.6 GiB), and a pipeline process is given 450 MiB: two nodes of 4 GiB
 * leave over 10 GiB of a 24 GiB machine to spare. 4 GiB is twice what the cluster tests give a node: node 1 runs the
 * dataset's INSERT ... SELECT and the record rebuild for both shards.
 */
const MEMORY_PER_NODE_BYTES = 4 * 1024 ** 3;
const CLUSTER_NAME = 'holdscope_bench';
const RETENTION_DAYS = 30;
/** A build or a dataset INSERT runs single statements for minutes, as in main.ts. */
const REQUEST_TIMEOUT_MS = 60 * 60_000;

export interface ClusterStageOptions {
  /** Names the stage's databases and consumer group apart from every other run's. */
  run: string;
  brokers: string[];
  /** The backlog stages 1-2 drained, still in the broker: read again from its start by a consumer group of its own. */
  backlogTopic: string;
  backlogSpans: number;
  singleNode: {
    client: ClickHouseClient;
    /** The database stage 2's pipeline drained the backlog into: the template of the single node's query dataset. */
    templateDb: string;
    /** Stage 2's figure: the same backlog drained by one pipeline process into the single server. */
    pipelineSpansPerSecond: number;
  };
  /** Lifecycles in each side's query dataset. */
  lifecycles: number;
  /** Times each page request is timed, after PAGE_WARM_UPS untimed. */
  runs: number;
  quick: boolean;
  /** Each figure is added here as it is measured. */
  figures: FigureSheet;
}

/** The cluster, its watchdog, a client of each node, and the work done again because a node aborted under it. */
interface Sharded {
  cluster: ClickHouseCluster;
  watchdog: NodeWatchdog;
  nodes: ClickHouseClient[];
  retried: string[];
  despiteAborts<T>(what: string, body: () => Promise<T>): Promise<T>;
}

/** Runs the stage; resolves with its figures for the bench's JSON line (they are in `figures` already). */
export async function runClusterStage(options: ClusterStageOptions): Promise<Record<string, number>> {
  stage('cluster: starting 2 shards x 1 replica');
  const cluster = await startClickHouseCluster({ shards: 2, replicas: 1, memoryPerNodeBytes: MEMORY_PER_NODE_BYTES, name: CLUSTER_NAME });
  const watchdog = watchNodes(cluster);
  const nodes = await Promise.all(
    cluster.nodes.map((n) => createClickHouse({ url: n.url, dataPath: '', requestTimeoutMs: REQUEST_TIMEOUT_MS })),
  );
  const retried: string[] = [];
  const sharded: Sharded = {
    cluster,
    watchdog,
    nodes,
    retried,
    despiteAborts: (what, body) => checkDespiteAborts(cluster, watchdog, what, body, retried),
  };
  const singleDb = `bench_cluster_single_${options.run}`;
  try {
    const drain = await drainIntoCluster(options, sharded);
    const pages = await compareThePage(options, sharded, drain.database, singleDb);
    options.figures.add({
      name: '  cluster: chdb node restarts',
      value: watchdog.restarts.length,
      unit: '',
      note:
        watchdog.restarts.length === 0
          ? 'no node aborted'
          : `${watchdog.restarts.join('; ')}; done again once the node was back: ${retried.join(', ') || 'nothing'}`,
    });
    return { ...drain.json, ...pages, cluster_node_restarts: watchdog.restarts.length };
  } finally {
    watchdog.stop();
    // Dropped so that the single server ends the run as it began the stage; a failure here must not hide the stage's.
    await options.singleNode.client.command({ query: `DROP DATABASE IF EXISTS ${singleDb} SYNC` }).catch(() => undefined);
    await Promise.all(nodes.map((c) => c.close()));
    await cluster.stop();
  }
}

/** The schema node by node, as `holdscope migrate` would create it, then the backlog drained by a pipeline process through node 1. */
async function drainIntoCluster(options: ClusterStageOptions, sharded: Sharded) {
  const { cluster, nodes, watchdog } = sharded;
  const database = `bench_cluster_${options.run}`;
  const nodeUrls = cluster.nodes.map((n) => n.url).join(',');
  const storage = ['--database', database, '--clickhouse-cluster', cluster.name, '--clickhouse-cluster-ddl', 'node-by-node'];
  const config = storageConfigSchema.parse({
    clickhouseUrl: cluster.nodes[0]!.url,
    database,
    clickhouseCluster: cluster.name,
    clickhouseClusterDdl: 'node-by-node',
    clickhouseNodes: nodeUrls,
    retentionDays: RETENTION_DAYS,
  });
  // Every statement is IF NOT EXISTS: a migration a node abort cut short is simply run again.
  await sharded.despiteAborts('creating the schema', () => migrateStorage(nodes[0]!, config, quietLog));
  stage('cluster: pipeline draining the backlog into 2 shards');
  const restartsBefore = watchdog.restarts.length;
  const drained = await drainThroughPipeline(
    [
      ...['--kafka-brokers', options.brokers.join(','), '--topics', options.backlogTopic, '--group-id', `pipeline-cluster-${options.run}`],
      ...['--clickhouse-url', cluster.nodes[0]!.url, ...storage, '--clickhouse-nodes', nodeUrls],
    ],
    options.backlogSpans,
    (n) => progress(`cluster pipeline: ${n} rows`),
  );
  const restarts = watchdog.restarts.length - restartsBefore;
  const ratio = drained.spansPerSecond / options.singleNode.pipelineSpansPerSecond;
  options.figures.add({
    name: 'cluster pipeline',
    value: Math.round(drained.spansPerSecond),
    unit: 'spans/s',
    note:
      `the same backlog, one holdscope pipeline process writing through node 1's Distributed tables into 2 shards x 1 replica, ` +
      `${drained.seconds.toFixed(2)} s, peak RSS ${Math.round(drained.peakRssMiB)} MiB; both shards on the same ${os.cpus().length} cores as ` +
      `the pipeline and the broker${restarts > 0 ? `; ${restarts} node restarts during the drain (in its time)` : ''}`,
  });
  options.figures.add({
    name: '  2 shards / 1 shard throughput',
    value: Number(ratio.toFixed(3)),
    unit: '',
    note:
      `against stage 2's ${fmt(options.singleNode.pipelineSpansPerSecond)} spans/s into the single server, measured earlier in the run: ` +
      'what the Distributed layer costs on shared cores, not what a shard on a machine of its own adds',
  });
  return {
    database,
    json: { cluster_pipeline_spans_per_s: Math.round(drained.spansPerSecond), cluster_throughput_ratio: Number(ratio.toFixed(3)) },
  };
}

/** The same-size dataset on both sides, their merges settled, then the on-call page timed on each (the single node first). */
async function compareThePage(
  options: ClusterStageOptions,
  sharded: Sharded,
  clusterTemplateDb: string,
  singleDb: string,
): Promise<Record<string, number>> {
  const { cluster, nodes, watchdog } = sharded;
  const single = options.singleNode.client;
  const clusterDb = `bench_cluster_queries_${options.run}`;
  const endMs = Date.now();
  const buildProgress = (n: number) => progress(`cluster stage dataset: ${n} lifecycles`);
  const build = (client: ClickHouseClient, templateDb: string, database: string, layout?: { name: string; nodes: ClickHouseClient[] }) =>
    buildQueryDataset({ client, templateDb, database, lifecycles: options.lifecycles, endMs, cluster: layout, onProgress: buildProgress });
  stage(`cluster: building ${options.lifecycles.toLocaleString('en-US')} lifecycles on the single node`);
  const onOne = await build(single, options.singleNode.templateDb, singleDb);
  stage(`cluster: building ${options.lifecycles.toLocaleString('en-US')} lifecycles on 2 shards`);
  const restartsBefore = watchdog.restarts.length;
  const onTwo = await sharded.despiteAborts('building the dataset', async () => {
    // A build a node abort cut short would leave rows twice once begun again: begun again from nothing.
    await cluster.runOnEveryNode(`DROP DATABASE IF EXISTS ${clusterDb} SYNC`);
    return build(nodes[0]!, clusterTemplateDb, clusterDb, { name: cluster.name, nodes });
  });
  const inWindow = await lifecyclesSince(single, singleDb, endMs - 3_600_000);
  options.figures.add({
    name: 'cluster stage dataset',
    value: onTwo.lifecycles,
    unit: 'lifecycles',
    note:
      `on 2 shards (${fmt(onOne.lifecycles)} on the single node), ${fmt(inWindow)} in the last hour; built in ${onOne.seconds.toFixed(0)} s on the single ` +
      `node and ${onTwo.seconds.toFixed(0)} s through the Distributed tables${watchdog.restarts.length > restartsBefore ? ' (node restarts included)' : ''}. ` +
      `Not stage 4's 10 M: that build on 2 shards sharing these cores would take about ten times as long; the page's cost ` +
      'follows the lifecycles in its window, not the table',
  });
  stage('cluster: waiting for background merges on both sides');
  const minutes = options.quick ? 1 : 5;
  const merges = await Promise.all([single, ...nodes].map((client) => settleMerges(client, { timeoutMs: minutes * 60_000 })));
  const requestId = await lastHourRelease(single, singleDb, endMs);
  const window = { from: new Date(endMs - 3_600_000).toISOString(), to: new Date(endMs).toISOString(), requestId, runs: options.runs };
  stage("cluster: timing the pages' requests on the single node");
  const oneNode = summarize(await timeOnCallPage(single, singleDb, window, 'single node'));
  stage("cluster: timing the pages' requests on 2 shards");
  const timingRestarts = watchdog.restarts.length;
  const twoShards = summarize(
    await sharded.despiteAborts('timing the pages', () => timeOnCallPage(nodes[0]!, clusterDb, window, '2 shards')),
  );
  const unsettled = merges.some((m) => !m.settled) ? `; merges still running after ${minutes} min on a side` : '';
  const restartNote = watchdog.restarts.length > timingRestarts ? '; a node restarted while it was timed' : '';
  return reportPages(options, onTwo.lifecycles, oneNode, twoShards, `${unsettled}${restartNote}`);
}

interface PageSummary {
  /** The slowest on-call request's p95, and which it was. */
  p95Ms: number;
  slowest: string;
  flagsP95Ms: number;
  flagsP50Ms: number;
  /** The p95 of each query /api/flags runs, timed alone: where a side's time goes. */
  queries: string;
}

function summarize(latencies: EndpointLatency[]): PageSummary {
  const onCall = latencies.filter((l) => l.page === 'on-call');
  const slowest = onCall.reduce((a, b) => (b.p95Ms > a.p95Ms ? b : a));
  const flags = onCall.find((l) => l.path === '/api/flags');
  if (!flags) throw new Error('the timed requests lack /api/flags');
  const queries = onCall
    .filter((l) => l.path.startsWith('/api/queries/'))
    .map((l) => `${l.path.slice('/api/queries/'.length)} ${Math.round(l.p95Ms)}`)
    .join(', ');
  return { p95Ms: slowest.p95Ms, slowest: slowest.path, flagsP95Ms: flags.p95Ms, flagsP50Ms: flags.p50Ms, queries };
}

function reportPages(
  options: ClusterStageOptions,
  lifecycles: number,
  one: PageSummary,
  two: PageSummary,
  caveat: string,
): Record<string, number> {
  const ratio = two.p95Ms / one.p95Ms;
  const add = (name: string, ms: number, note: string) => options.figures.add({ name, value: Math.round(ms), unit: 'ms p95', note });
  add(
    '  1 node: query p95',
    one.p95Ms,
    `slowest on-call request (${one.slowest}), last hour, ${options.runs} runs after ${PAGE_WARM_UPS} untimed`,
  );
  add(
    '  2 shards: query p95',
    two.p95Ms,
    `slowest on-call request (${two.slowest}) through a read API on node 1, the same window and runs${caveat}`,
  );
  options.figures.add({
    name: '  2 shards / 1 node query p95',
    value: Number(ratio.toFixed(3)),
    unit: '',
    note: 'both shards share the cores: each query is planned twice, read on both and merged on node 1, with no core of its own per shard',
  });
  add('  1 node: /api/flags', one.flagsP95Ms, `p50 ${Math.round(one.flagsP50Ms)} ms; its queries alone, p95 ms: ${one.queries}`);
  add('  2 shards: /api/flags', two.flagsP95Ms, `p50 ${Math.round(two.flagsP50Ms)} ms; its queries alone, p95 ms: ${two.queries}`);
  return {
    cluster_query_p95_ms: Math.round(two.p95Ms),
    single_query_p95_ms_1m: Math.round(one.p95Ms),
    cluster_query_ratio: Number(ratio.toFixed(3)),
    cluster_flags_p95_ms: Math.round(two.flagsP95Ms),
    single_flags_p95_ms_1m: Math.round(one.flagsP95Ms),
    cluster_lifecycles: lifecycles,
  };
}

/** Every request of the on-call, Compare and request pages, timed through a read API of its own over `client`. */
async function timeOnCallPage(
  client: ClickHouseClient,
  database: string,
  window: { from: string; to: string; requestId: string; runs: number },
  label: string,
): Promise<EndpointLatency[]> {
  const api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
  try {
    return await timePageRequests({
      ...window,
      apiUrl: `http://127.0.0.1:${api.port}`,
      warmUps: PAGE_WARM_UPS,
      onProgress: (n) => progress(`${label}: ${n} page requests made`),
    });
  } finally {
    await api.close();
  }
}

/** A released request of the window's last hour, for the request page (the same id on both sides: the same copies). */
async function lastHourRelease(client: ClickHouseClient, database: string, endMs: number): Promise<string> {
  const rows = await (
    await client.query({
      query: `SELECT request_id FROM ${database}.spans WHERE name = 'pd.release' AND start_time >= {from:DateTime64(9)} LIMIT 1`,
      format: 'JSONEachRow',
      query_params: { from: clickhouseTime(endMs - 3_600_000) },
    })
  ).json<{ request_id: string }>();
  if (!rows[0]) throw new Error('the cluster stage dataset has no release in its last hour');
  return rows[0].request_id;
}

async function lifecyclesSince(client: ClickHouseClient, database: string, fromMs: number): Promise<number> {
  const rows = await (
    await client.query({
      query: `SELECT uniqExact(cluster, request_id, generation) AS n FROM ${database}.spans WHERE start_time >= {from:DateTime64(9)}`,
      format: 'JSONEachRow',
      query_params: { from: clickhouseTime(fromMs) },
    })
  ).json<{ n: number | string }>();
  return Number(rows[0]?.n ?? 0);
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const clickhouseTime = (ms: number) => new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
