import { readFileSync } from 'node:fs';
import { TupleParam } from '@clickhouse/client';
import { classifyClickHouseError, type ClickHouseClient } from '../common/index.ts';

const sql = (name: string) => readFileSync(new URL(`./sql/${name}.sql`, import.meta.url), 'utf8');
const REFRESH = sql('refresh_hold_minutes');
const LIST = sql('list_hold_minutes');

/** A (cluster, minute) pair of hold minutes (migration 0010); the minute as ClickHouse's 'YYYY-MM-DD hh:mm:ss' (UTC). */
export type HoldMinute = readonly [cluster: string, minute: string];

/**
 * Bounds of one statement's pairs. Each statement reads the held records of every minute from its first pair's to
 * its last's, so pairs further apart than MAX_GAP_MINUTES (a replay touching an old hour beside the current one) go
 * to statements of their own; MAX_SPAN_MINUTES bounds what one statement holds in memory (a rebuild, about 3,000
 * holds a minute at the bench's rate), and MAX_PAIRS_PER_STATEMENT the parameter's size (a server refuses a form
 * field over about 128 KB).
 */
const MAX_GAP_MINUTES = 10;
const MAX_SPAN_MINUTES = 120;
const MAX_PAIRS_PER_STATEMENT = 1000;

/** The pairs, sorted by minute, in statement-sized runs. */
export function planHoldMinuteStatements(pairs: readonly HoldMinute[]): HoldMinute[][] {
  // Each minute parsed once, for the order and the gaps.
  const sorted = pairs
    .map((pair) => ({ pair, ms: Date.parse(`${pair[1].replace(' ', 'T')}Z`) }))
    .sort((a, b) => a.ms - b.ms || (a.pair[0] < b.pair[0] ? -1 : a.pair[0] > b.pair[0] ? 1 : 0));
  const runs: HoldMinute[][] = [];
  let run: HoldMinute[] = [];
  let firstMs = 0;
  let lastMs = 0;
  for (const { pair, ms } of sorted) {
    if (
      run.length > 0 &&
      (run.length >= MAX_PAIRS_PER_STATEMENT || ms - lastMs > MAX_GAP_MINUTES * 60_000 || ms - firstMs >= MAX_SPAN_MINUTES * 60_000)
    ) {
      runs.push(run);
      run = [];
    }
    if (run.length === 0) firstMs = ms;
    run.push(pair);
    lastMs = ms;
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

/**
 * Computes the hold minutes of these pairs again from the held records. Idempotent: the newest computation of a
 * minute replaces the row of any older one.
 */
export async function refreshHoldMinutes(client: ClickHouseClient, database: string, pairs: readonly HoldMinute[]): Promise<void> {
  for (const run of planHoldMinuteStatements(pairs)) {
    try {
      await client.command({
        query: REFRESH,
        query_params: {
          db: database,
          minutes: run.map((p) => new TupleParam([...p])),
          first_minute: (run[0] as HoldMinute)[1],
          last_minute: (run[run.length - 1] as HoldMinute)[1],
        },
      });
    } catch (error) {
      throw classifyClickHouseError(error, `computing ${run.length} hold minutes`);
    }
  }
}

/** Computes every hold minute again from the held records: after migration 0010, and after a rebuild of the records. */
export async function rebuildHoldMinutes(client: ClickHouseClient, database: string): Promise<void> {
  let pairs: HoldMinute[];
  try {
    const res = await client.query({
      query: LIST,
      query_params: { db: database },
      format: 'JSONCompactEachRow',
    });
    pairs = await res.json<[string, string]>();
  } catch (error) {
    throw classifyClickHouseError(error, 'listing the minutes of the held records');
  }
  await refreshHoldMinutes(client, database, pairs);
}
