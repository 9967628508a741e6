import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { classifyClickHouseError, ConfigError, type ClickHouseClient, type Logger } from '../common/index.ts';
import { rebuildHoldMinutes } from './hold-minutes.ts';
import { rebuildLifecycleRecords } from './records.ts';

const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

export interface SchemaOptions {
  database: string;
  /** A ClickHouse cluster name: emits ON CLUSTER, Replicated engines and Distributed tables sharded by lifecycle key. */
  cluster?: string;
  /** Days raw spans and lifecycle records are kept (TTL). */
  retentionDays: number;
}

export interface Migration {
  version: number;
  name: string;
  statements: string[];
}

/** Fills a migration's template from validated options; identifiers are checked, never taken from span data. */
function render(sql: string, options: SchemaOptions): string[] {
  for (const [key, value] of [
    ['database', options.database],
    ['cluster', options.cluster ?? 'x'],
  ] as const) {
    if (!IDENTIFIER.test(value))
      throw new ConfigError(`${key}: expected an identifier ([A-Za-z_][A-Za-z0-9_]*), got ${JSON.stringify(value)}`);
  }
  if (!Number.isInteger(options.retentionDays) || options.retentionDays < 1) {
    throw new ConfigError(`retentionDays: expected an integer >= 1, got ${options.retentionDays}`);
  }
  const clustered = options.cluster !== undefined;
  const vars: Record<string, string> = {
    db: options.database,
    on_cluster: clustered ? `ON CLUSTER ${options.cluster}` : '',
    cluster_name: options.cluster ?? '',
    local: clustered ? '_local' : '',
    replacing: clustered ? 'ReplicatedReplacingMergeTree' : 'ReplacingMergeTree',
    aggregating: clustered ? 'ReplicatedAggregatingMergeTree' : 'AggregatingMergeTree',
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

/**
 * Applies the migrations not yet recorded in `schema_migrations`, in order. Every statement is idempotent
 * (IF NOT EXISTS), so a migration interrupted half-way is simply applied again.
 */
export async function migrate(client: ClickHouseClient, options: SchemaOptions, log?: Logger): Promise<{ applied: string[] }> {
  const migrations = loadMigrations(options);
  const onCluster = options.cluster ? `ON CLUSTER ${options.cluster}` : '';
  const run = async (query: string, doing: string) => {
    try {
      await client.command({ query });
    } catch (error) {
      throw classifyClickHouseError(error, doing);
    }
  };
  await run(`CREATE DATABASE IF NOT EXISTS ${options.database} ${onCluster}`, 'creating the database');
  await run(
    `CREATE TABLE IF NOT EXISTS ${options.database}.schema_migrations ${onCluster} (version UInt32, name String, applied_at DateTime DEFAULT now()) ` +
      `ENGINE = ${options.cluster ? 'ReplicatedMergeTree' : 'MergeTree'} ORDER BY version`,
    'creating schema_migrations',
  );
  const done = await client.query({ query: `SELECT DISTINCT version FROM ${options.database}.schema_migrations`, format: 'JSONEachRow' });
  const applied = new Set(((await done.json()) as { version: number }[]).map((r) => Number(r.version)));
  const newly: string[] = [];
  const record = async (m: Migration) => {
    await client.insert({
      table: `${options.database}.schema_migrations`,
      values: [{ version: m.version, name: m.name }],
      format: 'JSONEachRow',
    });
    log?.info({ migration: m.name }, 'applied migration');
    newly.push(m.name);
  };
  // A migration that needs the records computed again is recorded only once they are: interrupted, it is applied
  // (and the records computed) again. Several such migrations in one run compute them once, after the last.
  // Likewise for the hold minutes, which a computation of every record computes too.
  const awaitingRecords: Migration[] = [];
  const awaitingHoldMinutes: Migration[] = [];
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    for (const [i, statement] of m.statements.entries()) await run(statement, `migration ${m.name}, statement ${i + 1}`);
    if (RECOMPUTE_RECORDS_AFTER.has(m.version)) awaitingRecords.push(m);
    else if (RECOMPUTE_HOLD_MINUTES_AFTER.has(m.version)) awaitingHoldMinutes.push(m);
    else await record(m);
  }
  if (awaitingRecords.length > 0) {
    await backfillRecords(client, options.database, log);
    for (const m of [...awaitingRecords, ...awaitingHoldMinutes]) await record(m);
  } else if (awaitingHoldMinutes.length > 0) {
    log?.info('computing the hold minutes of the held records already in ClickHouse');
    await rebuildHoldMinutes(client, options.database);
    for (const m of awaitingHoldMinutes) await record(m);
  }
  // Retention may change between runs: TTLs follow the configuration every time.
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
  ]) {
    await run(
      `ALTER TABLE ${options.database}.${table}${local} ${onCluster} MODIFY TTL toDateTime(${column}) + INTERVAL ${options.retentionDays} DAY`,
      `setting the retention of ${table}`,
    );
  }
  return { applied: newly };
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
