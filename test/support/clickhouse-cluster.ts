/**
 * A ClickHouse cluster on one machine for tests: shards x replicas chdb servers (scripts/chdb-server.mjs, one
 * process per node), each with a config holding its macros and a remote_servers cluster naming every node.
 *
 * What such a cluster can and cannot do (../shared/notes/infrastructure.md, "A ClickHouse cluster on one machine"):
 * - chdb holds clickhouse-local only: no ReplicatedMergeTree, no `ON CLUSTER` DDL, no Keeper. A schema is created
 *   node by node (runOnEveryNode), with plain MergeTree on every node;
 * - replication is what a Distributed table does with `internal_replication=false` (set here): it writes every
 *   replica itself; `insert_distributed_sync = 1` makes an INSERT wait for every shard and replica;
 * - a node down: Distributed reads fall back to the other replica of its shard, a sync INSERT fails (Code 210);
 * - a node has been seen dying silently (about once in 15 fresh clusters): call assertAllAlive() where a test
 *   would otherwise fail with a bare ECONNREFUSED, so the report names the node and how it ended.
 * Ports are picked free before the configs are written (remote_servers needs them all up front), and each node
 * gets its own max_server_memory_usage (the default, 90% of RAM per node, would let 4 nodes overcommit).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './alerting.ts';
import { clickhouseClient, startClickHouseServer, type ClickHouseServer } from './clickhouse-server.ts';

const DEFAULT_MEMORY_PER_NODE_BYTES = 2 * 1024 ** 3;
const START_ATTEMPTS = 3;
// chdb-server.mjs exits with 4 when a port it was given is taken: another process won the race for it.
const PORT_TAKEN = /exit code 4\b/;

export interface ClickHouseClusterOptions {
  shards?: number;
  replicas?: number;
  /** max_server_memory_usage of each node. Default 2 GiB: modest, and 4 nodes stay well under this machine's RAM. */
  memoryPerNodeBytes?: number;
  /** Name in remote_servers (and so in system.clusters, Distributed(...), cluster(...)). Default `holdscope_test`. */
  name?: string;
}

export interface ClickHouseNode {
  /** 1-based, as system.clusters' shard_num and the {shard} macro. */
  readonly shard: number;
  /** 1-based, as system.clusters' replica_num and the {replica} macro. */
  readonly replica: number;
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly httpPort: number;
  /** Native protocol port, as listed in remote_servers. */
  readonly tcpPort: number;
  /** Pid of the running server process, -1 while down. */
  readonly pid: number;
  /** How the last server process ended (`undefined` while it runs). */
  readonly lastExit: ClickHouseServer['lastExit'];
  /** `shard S replica R (http PORT, tcp PORT)` for messages. */
  readonly label: string;
  /** SIGKILL (a crash), wait for the exit. */
  kill(): Promise<void>;
  /** Start again with the same config, data and ports; resolves once it answers /ping. */
  restart(): Promise<void>;
}

export interface ClickHouseCluster {
  readonly name: string;
  /** Ordered by shard, then replica. */
  readonly nodes: readonly ClickHouseNode[];
  node(shard: number, replica: number): ClickHouseNode;
  /** Nodes whose process is not running, each with how it ended. */
  deadNodes(): { node: ClickHouseNode; exit: string }[];
  /** Throws an error naming every dead node and its exit status (exit code or signal). */
  assertAllAlive(): void;
  /** Runs one statement on every node over HTTP, node by node (what `ON CLUSTER` would do, which chdb lacks). */
  runOnEveryNode(query: string): Promise<void>;
  /** Stops every node and removes the cluster's directory. Idempotent. */
  stop(): Promise<void>;
}

interface NodePlan {
  shard: number;
  replica: number;
  httpPort: number;
  tcpPort: number;
  dir: string;
}

function describeExit(exit: ClickHouseServer['lastExit']): string {
  if (!exit) return 'running';
  return exit.signal ? `killed by ${exit.signal}` : `exit code ${exit.code}`;
}

/** Distinct free ports: two per node, all chosen before any config is written. */
async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

function remoteServersXml(name: string, plans: readonly NodePlan[], shards: number): string {
  const shardXml = Array.from({ length: shards }, (_, i) => {
    const replicas = plans
      .filter((p) => p.shard === i + 1)
      .map((p) => `<replica><host>127.0.0.1</host><port>${p.tcpPort}</port></replica>`)
      .join('');
    return `<shard><internal_replication>false</internal_replication>${replicas}</shard>`;
  }).join('\n      ');
  return `<remote_servers>\n    <${name}>\n      ${shardXml}\n    </${name}>\n  </remote_servers>`;
}

function nodeConfigXml(plan: NodePlan, remoteServers: string, memoryBytes: number): string {
  return `<clickhouse>
  <listen_host>127.0.0.1</listen_host>
  <http_port>${plan.httpPort}</http_port>
  <tcp_port>${plan.tcpPort}</tcp_port>
  <max_server_memory_usage>${memoryBytes}</max_server_memory_usage>
  <macros><shard>${plan.shard}</shard><replica>${plan.replica}</replica></macros>
  ${remoteServers}
</clickhouse>
`;
}

async function planNodes(root: string, name: string, shards: number, replicas: number, memoryBytes: number): Promise<NodePlan[]> {
  const ports = await distinctFreePorts(2 * shards * replicas);
  const plans: NodePlan[] = [];
  for (let s = 1; s <= shards; s++) {
    for (let r = 1; r <= replicas; r++) {
      const i = plans.length;
      plans.push({ shard: s, replica: r, httpPort: ports[2 * i]!, tcpPort: ports[2 * i + 1]!, dir: join(root, `s${s}r${r}`) });
    }
  }
  const remoteServers = remoteServersXml(name, plans, shards);
  for (const plan of plans) {
    mkdirSync(plan.dir, { recursive: true });
    writeFileSync(join(plan.dir, 'config.xml'), nodeConfigXml(plan, remoteServers, memoryBytes));
  }
  return plans;
}

function toNode(plan: NodePlan, server: ClickHouseServer): ClickHouseNode {
  return {
    shard: plan.shard,
    replica: plan.replica,
    url: server.url,
    httpPort: plan.httpPort,
    tcpPort: plan.tcpPort,
    label: `shard ${plan.shard} replica ${plan.replica} (http ${plan.httpPort}, tcp ${plan.tcpPort})`,
    get pid() {
      return server.pid;
    },
    get lastExit() {
      return server.lastExit;
    },
    kill: () => server.kill(),
    restart: () => server.restart(),
  };
}

/** Starts every node at once; on failure stops those that started and rethrows. */
async function startNodes(plans: readonly NodePlan[]): Promise<ClickHouseServer[]> {
  const results = await Promise.allSettled(
    plans.map((plan) =>
      startClickHouseServer({
        path: join(plan.dir, 'data'),
        port: plan.httpPort,
        tcpPort: plan.tcpPort,
        configFile: join(plan.dir, 'config.xml'),
      }),
    ),
  );
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [{ plan: plans[i]!, reason: r.reason as Error }] : []));
  if (failed.length === 0) return started;
  await Promise.all(started.map((server) => server.stop()));
  const [first] = failed;
  throw new Error(
    `clickhouse-cluster: node shard ${first!.plan.shard} replica ${first!.plan.replica} did not start: ${first!.reason.message}`,
    {
      cause: first!.reason,
    },
  );
}

/**
 * Starts a cluster of shards x replicas nodes (default 2 x 2) in a fresh temporary directory and resolves once
 * every node answers /ping. Retries with new ports when another process took one of them in the meantime.
 */
export async function startClickHouseCluster(options: ClickHouseClusterOptions = {}): Promise<ClickHouseCluster> {
  const { shards = 2, replicas = 2, memoryPerNodeBytes = DEFAULT_MEMORY_PER_NODE_BYTES, name = 'holdscope_test' } = options;
  const root = mkdtempSync(join(tmpdir(), 'holdscope-cluster-'));
  for (let attempt = 1; ; attempt++) {
    const plans = await planNodes(root, name, shards, replicas, memoryPerNodeBytes);
    try {
      return clusterOf(name, root, plans, await startNodes(plans));
    } catch (err) {
      rmSync(root, { recursive: true, force: true });
      if (attempt >= START_ATTEMPTS || !PORT_TAKEN.test((err as Error).message)) throw err;
      mkdirSync(root);
    }
  }
}

function clusterOf(name: string, root: string, plans: readonly NodePlan[], servers: readonly ClickHouseServer[]): ClickHouseCluster {
  const nodes = plans.map((plan, i) => toNode(plan, servers[i]!));
  let stopped = false;
  const deadNodes = (): { node: ClickHouseNode; exit: string }[] =>
    // By its exit, not its pid: a server that crashed (SIGABRT) keeps its last pid until stop() or kill().
    nodes.filter((node) => node.pid === -1 || node.lastExit !== undefined).map((node) => ({ node, exit: describeExit(node.lastExit) }));
  return {
    name,
    nodes,
    node(shard, replica) {
      const found = nodes.find((n) => n.shard === shard && n.replica === replica);
      if (!found) throw new Error(`clickhouse-cluster: no node shard ${shard} replica ${replica}`);
      return found;
    },
    deadNodes,
    assertAllAlive() {
      const dead = deadNodes();
      if (dead.length === 0) return;
      const list = dead.map(({ node, exit }) => `${node.label}: ${exit}`).join('; ');
      throw new Error(`clickhouse-cluster ${name}: ${dead.length} of ${nodes.length} nodes dead: ${list}`);
    },
    async runOnEveryNode(query) {
      for (const node of nodes) {
        const client = clickhouseClient(node.url);
        try {
          await client.command({ query });
        } catch (err) {
          throw new Error(`clickhouse-cluster: on ${node.label}: ${(err as Error).message}`, { cause: err });
        } finally {
          await client.close();
        }
      }
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await Promise.all(servers.map((server) => server.stop()));
      rmSync(root, { recursive: true, force: true, maxRetries: 3 });
    },
  };
}
