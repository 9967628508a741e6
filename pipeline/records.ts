import { readFileSync } from 'node:fs';
import { TupleParam } from '@clickhouse/client';
import { classifyClickHouseError, type ClickHouseClient } from '../common/index.ts';
import { lifecycleKeyId } from '../contract/index.ts';
import { rebuildHoldMinutes, refreshHoldMinutes, type HoldMinute } from './hold-minutes.ts';

/**
 * A lifecycle key (contract/events.ts `LifecycleKey`) as the tuple the refresh statements take as a query parameter
 * (`Array(Tuple(String, String, UInt32))`).
 */
export type LifecycleKeyTuple = readonly [cluster: string, requestId: string, generation: number];

const sql = (name: string) => readFileSync(new URL(`./sql/${name}.sql`, import.meta.url), 'utf8');
const REFRESH = sql('refresh_lifecycle_records');
const REBUILD = sql('rebuild_lifecycle_records');
const TOUCHED_HOLD_MINUTES = sql('touched_hold_minutes');

/**
 * How keys travel to a refresh statement. They are query parameters, and a ClickHouse server refuses a form field
 * over about 128 KB ("Field value too long"), which would stall the writer for good: each parameter holds at most
 * 1,000 keys or 64 KB of key text. Planning the statement (the views it reads through) costs about 35 ms whatever
 * the keys, so one statement takes several parameters (`keys_0` … `keys_3` in the SQL): 4,000 keys in one
 * statement cost about 40% of four statements of 1,000.
 */
const MAX_KEYS_PER_PARAMETER = 1000;
const MAX_KEY_TEXT_PER_PARAMETER = 64 * 1024;
const PARAMETERS_PER_STATEMENT = 4;

/** About how much text a key takes in the parameter (quotes, commas and escapes included). */
const keyText = ([cluster, requestId]: LifecycleKeyTuple) => 2 * (cluster.length + requestId.length) + 24;

/** The distinct lifecycle keys of span rows, in first-seen order. */
export class LifecycleKeySet {
  private readonly keys = new Map<string, LifecycleKeyTuple>();

  add(cluster: string, requestId: string, generation: number): void {
    const id = lifecycleKeyId(cluster, requestId, generation);
    if (!this.keys.has(id)) this.keys.set(id, [cluster, requestId, generation]);
  }

  addAll(keys: Iterable<LifecycleKeyTuple>): void {
    for (const [cluster, requestId, generation] of keys) this.add(cluster, requestId, generation);
  }

  values(): LifecycleKeyTuple[] {
    return [...this.keys.values()];
  }
}

/**
 * Recomputes the stored records of these lifecycles from their states (after their spans are in ClickHouse), then
 * the hold minutes their holds started in (migration 0010). Idempotent: running it again, or for a replayed batch,
 * writes the same records and minutes. `onRecordsStored` is told as soon as each statement's records (and so their
 * flags) are stored, before the hold minutes: the violation push waits for it, and the minutes are no part of an alert.
 */
export async function refreshLifecycleRecords(
  client: ClickHouseClient,
  database: string,
  keys: readonly LifecycleKeyTuple[],
  onRecordsStored?: () => void,
): Promise<void> {
  const statements = keyStatements(database, keys);
  const touched = new Map<string, HoldMinute>();
  for (const { params, count } of statements) {
    try {
      await client.command({ query: REFRESH, query_params: params });
    } catch (error) {
      throw classifyClickHouseError(error, `refreshing ${count} lifecycle records`);
    }
    // Each statement's records page without waiting for the next statement's (a round of 10,000 keys takes three).
    onRecordsStored?.();
  }
  for (const { params, count } of statements) {
    try {
      const res = await client.query({ query: TOUCHED_HOLD_MINUTES, query_params: params, format: 'JSONCompactEachRow' });
      for (const pair of await res.json<[string, string]>()) touched.set(`${pair[0]}\u0000${pair[1]}`, pair);
    } catch (error) {
      throw classifyClickHouseError(error, `finding the hold minutes of ${count} lifecycles`);
    }
  }
  await refreshHoldMinutes(client, database, [...touched.values()]);
}

/** The keys as the parameters of as few statements as they fit (`keys_0` … `keys_3` in the SQL). */
function keyStatements(database: string, keys: readonly LifecycleKeyTuple[]): { params: Record<string, unknown>; count: number }[] {
  const parameters = splitKeys(keys);
  const statements: { params: Record<string, unknown>; count: number }[] = [];
  for (let first = 0; first < parameters.length; first += PARAMETERS_PER_STATEMENT) {
    const statement = parameters.slice(first, first + PARAMETERS_PER_STATEMENT);
    const params: Record<string, unknown> = { db: database };
    let count = 0;
    for (let slot = 0; slot < PARAMETERS_PER_STATEMENT; slot++) {
      const chunk = statement[slot] ?? [];
      params[`keys_${slot}`] = chunk.map((k) => new TupleParam([...k]));
      count += chunk.length;
    }
    statements.push({ params, count });
  }
  return statements;
}

/** The keys in parameter-sized chunks, in order. */
function splitKeys(keys: readonly LifecycleKeyTuple[]): LifecycleKeyTuple[][] {
  const chunks: LifecycleKeyTuple[][] = [];
  for (let first = 0; first < keys.length;) {
    let end = first + 1;
    let text = keyText(keys[first] as LifecycleKeyTuple);
    for (; end < keys.length && end - first < MAX_KEYS_PER_PARAMETER; end++) {
      text += keyText(keys[end] as LifecycleKeyTuple);
      if (text > MAX_KEY_TEXT_PER_PARAMETER) break;
    }
    chunks.push(keys.slice(first, end));
    first = end;
  }
  return chunks;
}

/** Recomputes every stored record, in `parts` statements (each merges about 1/parts of the lifecycles), then every hold minute. */
export async function rebuildLifecycleRecords(
  client: ClickHouseClient,
  database: string,
  options: { parts?: number; onProgress?: (partsDone: number, parts: number) => void } = {},
): Promise<void> {
  const parts = options.parts ?? 16;
  for (let part = 0; part < parts; part++) {
    try {
      await client.command({ query: REBUILD, query_params: { db: database, parts, part } });
    } catch (error) {
      throw classifyClickHouseError(error, `rebuilding lifecycle records (part ${part + 1} of ${parts})`);
    }
    options.onProgress?.(part + 1, parts);
  }
  await rebuildHoldMinutes(client, database);
}
