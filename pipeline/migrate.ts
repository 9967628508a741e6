import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  checkedIdentifier,
  classifyClickHouseError,
  ConfigError,
  createClickHouse,
  retry,
  type ClickHouseClient,
  type Logger,
} from '../common/index.ts';
import { clickHouseConnection, type StorageConfig } from './config.ts';
import { rebuildHoldMinutes } from './hold-minutes.ts';
import { rebuildLifecycleRecords } from './records.ts';

const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');

/** How a cluster's schema is created (pipeline/config.ts `clickhouseClusterDdl` says what each mode is for). */
type ClusterDdl = StorageConfig['clickhouseClusterDdl'];

export interface SchemaOptions {
  database: string;
  /** A ClickHouse cluster name: `_local` tables fronted by Distributed tables sharded by lifecycle key. */
  cluster?: string;
  /** How the cluster's schema is created (only with `cluster`). Default 'on-cluster'. */
  ddl?: ClusterDdl;
  /** Days raw spans and lifecycle records are kept (TTL). */
  retentionDays: number;
}

interface MigrateOptions extends SchemaOptions {
  /**
   * With ddl 'node-by-node': a client of every node of the cluster (each replica of each shard), which each get the
   * schema's DDL and their own `schema_migrations`. The data a migration moves (its INSERTs, a records backfill) goes
   * once through the Distributed tables, over the `client` given to migrate().
   */
  nodes?: readonly ClickHouseClient[];
}

export interface Migration {
  version: number;
  name: string;
  statements: string[];
}

/** True when the schema is created ON CLUSTER with Replicated engines (the production path; a DDL queue needed). */
const replicatedDdl = (options: SchemaOptions) => options.cluster !== undefined && (options.ddl ?? 'on-cluster') === 'on-cluster';
const onClusterClause = (options: SchemaOptions) => (replicatedDdl(options) ? `ON CLUSTER ${options.cluster}` : '');

/** Fills a migration's template from validated options; identifiers are checked, never taken from span data. */
function render(sql: string, options: SchemaOptions): string[] {
  checkedIdentifier('database', options.database);
  if (options.cluster !== undefined) checkedIdentifier('cluster', options.cluster);
  if (!Number.isInteger(options.retentionDays) || options.retentionDays < 1) {
    throw new ConfigError(`retentionDays: expected an integer >= 1, got ${options.retentionDays}`);
  }
  const clustered = options.cluster !== undefined;
  const replicated = replicatedDdl(options);
  const vars: Record<string, string> = {
    db: options.database,
    on_cluster: onClusterClause(options),
    cluster_name: options.cluster ?? '',
    local: clustered ? '_local' : '',
    replacing: replicated ? 'ReplicatedReplacingMergeTree' : 'ReplacingMergeTree',
    aggregating: replicated ? 'ReplicatedAggregatingMergeTree' : 'AggregatingMergeTree',
    ttl_days: String(options.retentionDays),
  };
  const body = sql.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
    if (!(name in vars)) throw new Error(`migration template uses unknown variable {{${name}}}`);
    return vars[name] as string;
  });
  return body
    .split(/;\s*(?:\n|$)/)
    .map((s) => s.trim())
    .filter((s) => s.replace(/^--.*$/gm, '').trim().length > 0)
    .filter((s) => clustered || !/^--\s*@cluster-only/m.test(s));
}

export function loadMigrations(options: SchemaOptions): Migration[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{4}_.+\.sql$/.test(f))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.replace(/\.sql$/, ''),
      statements: render(readFileSync(join(MIGRATIONS_DIR, file), 'utf8'), options),
    }));
}

/** A node the schema's DDL runs on, with the migrations its `schema_migrations` records. */
interface Target {
  client: ClickHouseClient;
  /** `node N of M: ` in messages when there are several. */
  label: string;
  applied: Set<number>;
}

/** A statement that moves data rather than defines tables: run once, through the Distributed tables on a cluster. */
const isDataStatement = (statement: string) => /^INSERT\b/i.test(statement.replace(/^--.*$/gm, '').trim());

/**
 * How long a statement is retried on transient failures (a node restarting, a connection reset) before migrate
 * gives up: 60 s. Node by node, a run sends each statement to every node, and one reset among them should not undo
 * the run; every statement is idempotent, so one that ran before its answer was lost runs again harmlessly.
 */
const STATEMENT_RETRY_MS = 60_000;

async function runOn(client: ClickHouseClient, query: string, doing: string): Promise<void> {
  await retry(() => client.command({ query }), {
    classify: (error) => classifyClickHouseError(error, doing),
    signal: AbortSignal.timeout(STATEMENT_RETRY_MS),
  });
}

/** The nodes DDL runs on: every node in node-by-node mode, else the one client (ON CLUSTER reaches the rest). */
function ddlClients(client: ClickHouseClient, options: MigrateOptions): { client: ClickHouseClient; label: string }[] {
  if (options.cluster === undefined || replicatedDdl(options)) return [{ client, label: '' }];
  const nodes = options.nodes ?? [];
  if (nodes.length === 0) throw new ConfigError(`cluster ${options.cluster}: node-by-node DDL needs the URL of every node`);
  return nodes.map((node, i) => ({ client: node, label: `node ${i + 1} of ${nodes.length}: ` }));
}

/** Creates the database and `schema_migrations` on each target and reads what each has applied. */
async function openTargets(client: ClickHouseClient, options: MigrateOptions): Promise<Target[]> {
  const onCluster = onClusterClause(options);
  const engine = onCluster ? 'ReplicatedMergeTree' : 'MergeTree';
  const targets: Target[] = [];
  for (const { client: node, label } of ddlClients(client, options)) {
    await runOn(node, `CREATE DATABASE IF NOT EXISTS ${options.database} ${onCluster}`, `${label}creating the database`);
    await runOn(
      node,
      `CREATE TABLE IF NOT EXISTS ${options.database}.schema_migrations ${onCluster} (version UInt32, name String, applied_at DateTime DEFAULT now()) ` +
        `ENGINE = ${engine} ORDER BY version`,
      `${label}creating schema_migrations`,
    );
    const done = await node.query({ query: `SELECT DISTINCT version FROM ${options.database}.schema_migrations`, format: 'JSONEachRow' });
    const applied = new Set(((await done.json()) as { version: number }[]).map((r) => Number(r.version)));
    targets.push({ client: node, label, applied });
  }
  return targets;
}

/**
 * Applies the migrations not yet recorded in `schema_migrations`, in order. Every statement is idempotent
 * (IF NOT EXISTS), so a migration interrupted half-way is simply applied again. On a cluster created node by node
 * each node records its own migrations: a migration's DDL runs on the nodes that lack it, its data statements once
 * (through the Distributed tables), and each node records it once all of that succeeded.
 */
export async function migrate(client: ClickHouseClient, options: MigrateOptions, log?: Logger): Promise<{ applied: string[] }> {
  const migrations = loadMigrations(options);
  const targets = await openTargets(client, options);
  const newly = new Set<string>();
  const record = async (m: Migration, on: readonly Target[]) => {
    for (const target of on) {
      await target.client.insert({
        table: `${options.database}.schema_migrations`,
        values: [{ version: m.version, name: m.name }],
        format: 'JSONEachRow',
      });
      target.applied.add(m.version);
    }
    log?.info({ migration: m.name, nodes: on.length }, 'applied migration');
    newly.add(m.name);
  };
  // A migration that needs the records computed again is recorded only once they are: interrupted, it is applied
  // (and the records computed) again. Several such migrations in one run compute them once, after the last.
  // Likewise for the hold minutes, which a computation of every record computes too.
  const awaitingRecords: [Migration, Target[]][] = [];
  const awaitingHoldMinutes: [Migration, Target[]][] = [];
  for (const m of migrations) {
    const pending = targets.filter((t) => !t.applied.has(m.version));
    if (pending.length === 0) continue;
    for (const [i, statement] of m.statements.entries()) {
      const doing = `migration ${m.name}, statement ${i + 1}`;
      if (isDataStatement(statement)) await runOn(client, statement, doing);
      else for (const target of pending) await runOn(target.client, statement, `${target.label}${doing}`);
    }
    if (RECOMPUTE_RECORDS_AFTER.has(m.version)) awaitingRecords.push([m, pending]);
    else if (RECOMPUTE_HOLD_MINUTES_AFTER.has(m.version)) awaitingHoldMinutes.push([m, pending]);
    else await record(m, pending);
  }
  if (awaitingRecords.length > 0) {
    await backfillRecords(client, options.database, log);
    for (const [m, on] of [...awaitingRecords, ...awaitingHoldMinutes]) await record(m, on);
  } else if (awaitingHoldMinutes.length > 0) {
    log?.info('computing the hold minutes of the held records already in ClickHouse');
    await rebuildHoldMinutes(client, options.database);
    for (const [m, on] of awaitingHoldMinutes) await record(m, on);
  }
  await applyRetention(targets, options);
  return { applied: [...newly] };
}

/** Retention may change between runs: TTLs follow the configuration every time, on every node's local tables. */
async function applyRetention(targets: readonly Target[], options: MigrateOptions): Promise<void> {
  const onCluster = onClusterClause(options);
  const local = options.cluster ? '_local' : '';
  for (const [table, column] of [
    ['spans', 'start_time'],
    ['lifecycle_states', 'first_seen'],
    ['lifecycle_records', 'bucket'],
    ['lifecycle_flags', 'bucket'],
    ['lifecycle_holds', 'bucket'],
    ['late_write_pages', 'landed_at'],
    ['page_allocations', 'allocated_at'],
    ['hold_minutes', 'minute'],
    ['span_dead_letters', 'dead_at'],
    ['lifecycle_arms', 'first_seen'],
  ]) {
    for (const target of targets) {
      await runOn(
        target.client,
        `ALTER TABLE ${options.database}.${table}${local} ${onCluster} MODIFY TTL toDateTime(${column}) + INTERVAL ${options.retentionDays} DAY`,
        `${target.label}setting the retention of ${table}`,
      );
    }
  }
}

/**
 * Migrations after which every stored record is computed again from the lifecycle states: 0003 added the records
 * (lifecycles stored before it get theirs then), 0004 the flagged records (filled by its materialized view as the
 * records are written), 0005 changed their buckets (and emptied both record tables), 0006 the held records (as 0004).
 */
const RECOMPUTE_RECORDS_AFTER = new Set([3, 4, 5, 6]);

/** Migrations after which every hold minute is computed again from the held records: 0010 added them. */
const RECOMPUTE_HOLD_MINUTES_AFTER = new Set([10]);

async function backfillRecords(client: ClickHouseClient, database: string, log?: Logger): Promise<void> {
  const res = await client.query({
    query: 'SELECT count() AS n FROM {db:Identifier}.lifecycle_states',
    query_params: { db: database },
    format: 'JSONEachRow',
  });
  const states = Number(((await res.json()) as { n: number | string }[])[0]?.n ?? 0);
  if (states === 0) return;
  log?.info({ states }, 'computing the stored records of the lifecycles already in ClickHouse');
  await rebuildLifecycleRecords(client, database, {
    onProgress: (done, parts) => log?.info({ done, parts }, 'lifecycle records backfill'),
  });
}

/**
 * Brings the configured storage's schema up to date over `client`: what `holdscope migrate`, `pipeline`, `serve` and
 * `start` run. With node-by-node DDL it opens a client of every configured node for the run, and closes them after.
 */
export async function migrateStorage(client: ClickHouseClient, config: StorageConfig, log?: Logger): Promise<{ applied: string[] }> {
  const nodeByNode = config.clickhouseCluster !== undefined && config.clickhouseClusterDdl === 'node-by-node';
  const nodes = nodeByNode
    ? await Promise.all(config.clickhouseNodes.map((url) => createClickHouse({ ...clickHouseConnection(config), url })))
    : [];
  try {
    const options = {
      database: config.database,
      cluster: config.clickhouseCluster,
      ddl: config.clickhouseClusterDdl,
      retentionDays: config.retentionDays,
    };
    return await migrate(client, { ...options, nodes }, log);
  } finally {
    await Promise.all(nodes.map((node) => node.close()));
  }
}
