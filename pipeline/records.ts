import { readFileSync } from 'node:fs';
import { TupleParam } from '@clickhouse/client';
import { classifyClickHouseError, type ClickHouseClient } from '../common/index.ts';

/** A lifecycle's identity: (cluster, request id, generation). */
export type LifecycleKey = readonly [cluster: string, requestId: string, generation: number];

const sql = (name: string) => readFileSync(new URL(`./sql/${name}.sql`, import.meta.url), 'utf8');
const REFRESH = sql('refresh_lifecycle_records');
const REBUILD = sql('rebuild_lifecycle_records');

/**
 * Keys per refresh statement, and the text they may take. They travel as one query parameter, and a ClickHouse
 * server refuses a form field over about 128 KB ("Field value too long"), which would stall the writer for good:
 * 1,000 keys or 64 KB of key text, whichever comes first.
 */
export const MAX_KEYS_PER_REFRESH = 1000;
const MAX_KEY_TEXT_PER_REFRESH = 64 * 1024;

/** About how much text a key takes in the parameter (quotes, commas and escapes included). */
const keyText = ([cluster, requestId]: LifecycleKey) => 2 * (cluster.length + requestId.length) + 24;

/** The distinct lifecycle keys of span rows, in first-seen order. */
export class LifecycleKeySet {
  private readonly keys = new Map<string, LifecycleKey>();

  add(cluster: string, requestId: string, generation: number): void {
    const id = `${cluster}\u0000${requestId}\u0000${generation}`;
    if (!this.keys.has(id)) this.keys.set(id, [cluster, requestId, generation]);
  }

  addAll(keys: Iterable<LifecycleKey>): void {
    for (const [cluster, requestId, generation] of keys) this.add(cluster, requestId, generation);
  }

  values(): LifecycleKey[] {
    return [...this.keys.values()];
  }
}

/**
 * Recomputes the stored records of these lifecycles from their states (after their spans are in ClickHouse).
 * Idempotent: running it again, or for a replayed batch, writes the same records.
 */
export async function refreshLifecycleRecords(client: ClickHouseClient, database: string, keys: readonly LifecycleKey[]): Promise<void> {
  for (let first = 0; first < keys.length; ) {
    let end = first + 1;
    let text = keyText(keys[first] as LifecycleKey);
    for (; end < keys.length && end - first < MAX_KEYS_PER_REFRESH; end++) {
      text += keyText(keys[end] as LifecycleKey);
      if (text > MAX_KEY_TEXT_PER_REFRESH) break;
    }
    const chunk = keys.slice(first, end).map((k) => new TupleParam([...k]));
    first = end;
    try {
      await client.command({ query: REFRESH, query_params: { db: database, keys: chunk } });
    } catch (error) {
      throw classifyClickHouseError(error, `refreshing ${chunk.length} lifecycle records`);
    }
  }
}

/** Recomputes every stored record, in `parts` statements (each merges about 1/parts of the lifecycles). */
export async function rebuildLifecycleRecords(client: ClickHouseClient, database: string, options: { parts?: number; onProgress?: (partsDone: number, parts: number) => void } = {}): Promise<void> {
  const parts = options.parts ?? 16;
  for (let part = 0; part < parts; part++) {
    try {
      await client.command({ query: REBUILD, query_params: { db: database, parts, part } });
    } catch (error) {
      throw classifyClickHouseError(error, `rebuilding lifecycle records (part ${part + 1} of ${parts})`);
    }
    options.onProgress?.(part + 1, parts);
  }
}
