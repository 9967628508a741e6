import { classifyClickHouseError, type ClickHouseClient, type Logger } from '../common/index.ts';
import type { PipelineMetrics } from './metrics.ts';
import { Readable } from 'node:stream';
import { SPAN_COLUMNS, TSV_INSERT_SETTINGS, type EncodedRows } from './encode.ts';
import { LifecycleKeySet, refreshLifecycleRecords, type LifecycleKey } from './records.ts';

export interface SpanWriterOptions {
  client: ClickHouseClient;
  database: string;
  /** Rows per INSERT: large blocks are what ClickHouse inserts fastest. */
  maxBatchRows: number;
  /** How long rows wait for more before an INSERT (ms). */
  lingerMs: number;
  /** Least time between the starts of two record refreshes (ms), 0 when omitted: rounds further apart take more batches each. */
  refreshIntervalMs?: number;
  /** First and largest pause between retries of a failed INSERT (ms). */
  retryInitialMs: number;
  retryMaxMs: number;
  metrics: PipelineMetrics;
  log: Logger;
}

interface Waiter {
  keepAlive?: () => Promise<void>;
  resolve: () => void;
  reject: (error: Error) => void;
}

interface Pending extends Waiter {
  batch: EncodedRows;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface RefreshRequest {
  keys: LifecycleKey[];
  rows: number;
  waiters: Waiter[];
}

/**
 * A round waiting out the refresh interval starts at once when no rows have come for this long and none are being
 * inserted: its writers are then all the upstream has (a consumer at its in-flight bound, a quiet stream), so waiting
 * coalesces nothing and only stalls them. Live traffic at thousands of spans/s writes every few ms.
 */
const REFRESH_QUIET_MS = 50;

/** Lifecycle keys one record refresh round takes at most (before duplicates are dropped): its writers wait for all of them. */
const MAX_KEYS_PER_REFRESH_ROUND = 10_000;

/** Takes queued items from the front while their total size stays within `max` (always at least one). */
function takeUpTo<T>(queue: T[], max: number, sizeOf: (item: T) => number): { taken: T[]; size: number } {
  const taken: T[] = [];
  let size = 0;
  while (queue.length > 0 && (taken.length === 0 || size + sizeOf(queue[0] as T) <= max)) {
    const next = queue.shift() as T;
    taken.push(next);
    size += sizeOf(next);
  }
  return { taken, size };
}

/**
 * Coalesces rows from concurrent callers (Kafka partitions, collector requests) into large INSERTs into
 * `spans` (whose materialized view feeds the lifecycle states), then recomputes the stored records of the
 * lifecycles those rows belong to. `write` resolves only after ClickHouse has acknowledged both; while ClickHouse
 * is down it keeps retrying with backoff, so callers simply wait and memory stays bounded by what they hold.
 *
 * Refreshes run beside the inserts, one at a time and at most one per `refreshIntervalMs` while rows keep coming
 * (REFRESH_QUIET_MS), each taking every batch stored since the last began: spans are visible (through the lifecycles
 * view) as soon as they are inserted, and a lifecycle that several batches touched is recomputed once. Refreshes
 * that fall behind hold their writers, which holds the consumer's fetches.
 */
export class SpanWriter {
  private pending: Pending[] = [];
  private pendingRows = 0;
  private timer: NodeJS.Timeout | undefined;
  private inserting: Promise<void> = Promise.resolve();
  /** Stored batches whose records wait for a refresh, oldest first. */
  private refreshQueue: RefreshRequest[] = [];
  /** The refresh loop while it runs; it never rejects (its writers learn of failures). */
  private refreshing: Promise<void> | undefined;
  private stopped = false;
  /** performance.now() when the last refresh round began. */
  private lastRefreshStart = -Infinity;
  /** performance.now() of the last write, and INSERTs under way: whether more rows are on their way to a round. */
  private lastWriteAt = -Infinity;
  private insertsRunning = 0;
  /** Ends the wait of a round for its interval early, to look again (an INSERT ended) or to stop (shutdown). */
  private wakeRefresh: (() => void) | undefined;

  constructor(private readonly options: SpanWriterOptions) {}

  /** Resolves once every row is in ClickHouse. `keepAlive` runs during retries (Kafka heartbeats). */
  write(batch: EncodedRows, keepAlive?: () => Promise<void>): Promise<void> {
    if (batch.rows === 0) return Promise.resolve();
    this.lastWriteAt = performance.now();
    return new Promise((resolve, reject) => {
      this.pending.push({ batch, keepAlive, resolve, reject });
      this.pendingRows += batch.rows;
      this.options.metrics.rowsPending.set(this.pendingRows);
      if (this.pendingRows >= this.options.maxBatchRows) this.flushSoon(0);
      else this.flushSoon(this.options.lingerMs);
    });
  }

  get pendingRowCount(): number {
    return this.pendingRows;
  }

  private flushSoon(delayMs: number): void {
    if (delayMs === 0) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      void this.flush().catch(() => undefined); // the writers' own promises carry the failure
      return;
    }
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.flush().catch(() => undefined); // the writers' own promises carry the failure
    }, delayMs);
  }

  /** Inserts everything pending; resolves when it is in ClickHouse, records included. */
  async flush(): Promise<void> {
    // One INSERT at a time keeps ClickHouse's part count and the process's memory predictable.
    const run = () => this.insertPending();
    this.inserting = this.inserting.then(run, run);
    try {
      await this.inserting;
    } finally {
      await this.refreshing;
    }
  }

  private async insertPending(): Promise<void> {
    while (this.pending.length > 0) {
      const { taken: batch, size: count } = takeUpTo(this.pending, this.options.maxBatchRows, (p) => p.batch.rows);
      this.insertsRunning++;
      try {
        await this.insertWithRetry(batch.map((p) => p.batch.text), count, batch);
      } catch (error) {
        // Only after shutdown: the callers learn their rows were not stored (and commit nothing).
        for (const p of [...batch, ...this.pending.splice(0)]) p.reject(error as Error);
        this.pendingRows = 0;
        throw error;
      } finally {
        this.insertsRunning--;
        // A round waiting for the inserts to end looks again (it does not poll).
        this.wakeRefresh?.();
      }
      // The rows are stored; the batch's text is not needed any more, only its lifecycle keys (deduplicated once,
      // per refresh round).
      const waiters: Waiter[] = batch.map(({ keepAlive, resolve, reject }) => ({ keepAlive, resolve, reject }));
      this.refreshQueue.push({ keys: batch.flatMap((p) => p.batch.keys), rows: count, waiters });
      this.refreshing ??= this.refreshQueued();
    }
  }

  /** Refreshes queued batches until none is left; `refreshing` is cleared in the same turn as the last check. */
  private async refreshQueued(): Promise<void> {
    try {
      while (this.refreshQueue.length > 0) {
        // Waiting lets the batches stored meanwhile share this round; a stopping writer does not wait.
        await this.refreshDue();
        this.lastRefreshStart = performance.now();
        const { taken } = takeUpTo(this.refreshQueue, MAX_KEYS_PER_REFRESH_ROUND, (r) => r.keys.length);
        const keys = new LifecycleKeySet();
        for (const request of taken) keys.addAll(request.keys);
        const rows = taken.reduce((n, r) => n + r.rows, 0);
        await this.refreshRecords(keys.values(), rows, taken.flatMap((r) => r.waiters));
      }
    } finally {
      this.refreshing = undefined;
    }
  }

  /** Resolves when the next round may start: the interval is over, the writer is stopping, or no more rows are coming. */
  private async refreshDue(): Promise<void> {
    const dueAt = this.lastRefreshStart + (this.options.refreshIntervalMs ?? 0);
    for (;;) {
      const now = performance.now();
      if (now >= dueAt || this.stopped) return;
      const quietFor = now - this.lastWriteAt;
      if (quietFor >= REFRESH_QUIET_MS && this.pending.length === 0 && this.insertsRunning === 0) return;
      // Until the interval ends, or sooner the stream could have gone quiet; an INSERT ending or shutdown wakes it.
      const untilQuiet = REFRESH_QUIET_MS - quietFor;
      const ms = Math.max(1, untilQuiet > 0 ? Math.min(dueAt - now, untilQuiet) : dueAt - now);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        this.wakeRefresh = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeRefresh = undefined;
    }
  }

  /** Refreshes the records of a stored batch's lifecycles, then releases its writers. Never rejects. */
  private async refreshRecords(keys: LifecycleKey[], rows: number, waiters: Waiter[]): Promise<void> {
    try {
      await this.withRetry(`refreshing the records of ${keys.length} lifecycles`, waiters, async () => {
        const stopTimer = this.options.metrics.refreshSeconds.startTimer();
        await refreshLifecycleRecords(this.options.client, this.options.database, keys);
        stopTimer();
      });
    } catch (error) {
      for (const w of waiters) w.reject(error as Error);
      return;
    } finally {
      this.pendingRows = Math.max(0, this.pendingRows - rows);
      this.options.metrics.rowsPending.set(this.pendingRows);
    }
    for (const w of waiters) w.resolve();
  }

  private insertWithRetry(texts: string[], rows: number, waiters: Waiter[]): Promise<void> {
    const { client, database, metrics } = this.options;
    return this.withRetry(`inserting ${rows} span rows`, waiters, async () => {
      const stopTimer = metrics.insertSeconds.startTimer();
      await client.insert({
        table: `${database}.spans`,
        values: Readable.from(texts, { objectMode: false }),
        format: 'TabSeparated',
        columns: [...SPAN_COLUMNS],
        clickhouse_settings: TSV_INSERT_SETTINGS,
      });
      stopTimer();
      metrics.rowsInserted.inc(rows);
      metrics.lastInsert.set(Date.now() / 1000);
    });
  }

  /** Runs `attempt` until it succeeds, pausing with backoff between failures; gives up only after shutdown. */
  private async withRetry(doing: string, waiters: Waiter[], attempt: () => Promise<void>): Promise<void> {
    const { metrics, log } = this.options;
    let pause = this.options.retryInitialMs;
    for (let tries = 1; ; tries++) {
      try {
        await attempt();
        return;
      } catch (error) {
        const failure = classifyClickHouseError(error, doing);
        metrics.insertFailures.inc({ retriable: String(failure.retriable) });
        // A permanent error is logged loudly but still retried: dropping rows would lose accepted spans, and
        // the usual cause (a missing table, a full disk) is fixed by an operator while the consumer waits.
        log[failure.retriable ? 'warn' : 'error']({ err: failure.message, attempt: tries, retryInMs: pause }, `${doing} failed; retrying`);
        if (this.stopped) throw failure;
        for (const w of waiters) await w.keepAlive?.().catch(() => undefined);
        await sleep(pause);
        pause = Math.min(this.options.retryMaxMs, pause * 2);
      }
    }
  }

  /** Stops retrying failed inserts (pending writers are rejected), after flushing what can be flushed. */
  async shutdown(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.stopped = true;
    this.wakeRefresh?.();
    await this.flush().catch(() => undefined);
  }
}
