// Bounded concurrency for reads: at most `maxConcurrentReads` named queries of a client run in ClickHouse at once, at
// most `maxQueuedReads` wait for a turn, and past that a read is refused at once (503 with Retry-After) rather than
// queued without end. Twenty on-call pages refreshing a week-wide window then cost ClickHouse a few queries at a time,
// and the writes sharing it keep their turn.
import { createClickHouse, UnavailableError, type ClickHouseClient, type ClickHouseConnection } from '../common/index.ts';
import type { ReadLimits } from './read-window.ts';

/** How long a refused reader is told to wait: about one read's time at the default limits' queue. */
const BUSY_RETRY_AFTER_MS = 2000;

/** Every gate of the process at once, for the metrics (dashboards/request-metrics.ts). */
export interface ReadGateStats {
  running: number;
  waiting: number;
  /** Reads refused because the queue was full, since the process started. */
  refused: number;
}
const stats: ReadGateStats = { running: 0, waiting: 0, refused: 0 };
export const readGateStats = (): Readonly<ReadGateStats> => ({ ...stats });

/** A semaphore with a bounded FIFO queue. */
export class ReadGate {
  private running = 0;
  private readonly queue: { grant: () => void }[] = [];

  constructor(
    readonly maxConcurrent: number,
    readonly maxQueued: number,
  ) {}

  /**
   * Waits for a turn and resolves with its release (call it exactly once). Rejects with an UnavailableError (503) when
   * the queue is full, and with the signal's reason when `signal` aborts while waiting.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    if (this.running < this.maxConcurrent) return Promise.resolve(this.take());
    if (this.queue.length >= this.maxQueued) {
      stats.refused++;
      return Promise.reject(
        new UnavailableError(
          `${this.running} reads running and ${this.queue.length} waiting (maxQueuedReads ${this.maxQueued}): read refused, retry later`,
          {
            code: 'READS_BUSY',
            retryAfterMs: BUSY_RETRY_AFTER_MS,
          },
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const leave = () => {
        const at = this.queue.indexOf(waiter);
        if (at >= 0) this.queue.splice(at, 1);
        stats.waiting--;
        signal?.removeEventListener('abort', onAbort);
      };
      const onAbort = () => {
        leave();
        reject(signal?.reason);
      };
      const waiter = {
        grant: () => {
          leave();
          resolve(this.take());
        },
      };
      this.queue.push(waiter);
      stats.waiting++;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private take(): () => void {
    this.running++;
    stats.running++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      stats.running--;
      this.queue[0]?.grant();
    };
  }
}

const gates = new WeakMap<ClickHouseClient, ReadGate>();

/**
 * Clients of embedded ClickHouse (chdb) opened for reads. Their reads run one at a time whatever the limits say: chdb
 * runs parameterized queries one at a time across the whole process anyway (its parameter binding is not safe across
 * connections), so a second slot buys nothing; and a chdb query stopped by a limit after it began to answer leaves
 * its partial rows on the connection, where the next query's result would begin with them (measured with chdb 3.4).
 * One at a time, the runner clears them (queries/runner.ts) before any other read of the connection runs.
 */
const embedded = new WeakSet<ClickHouseClient>();

/**
 * A ClickHouse client for reads only. Give the read paths their own client where spans are written in the same
 * process (`holdscope start`): on embedded ClickHouse a query waits for the one before it on the same connection,
 * INSERTs included, so reads on the writer's connection would hold its INSERTs back for as long as they run; and
 * rows a stopped read leaves behind (see `embedded`) stay on the readers' connection.
 */
export async function openReadClient(connection: ClickHouseConnection): Promise<ClickHouseClient> {
  const client = await createClickHouse(connection);
  if (!connection.url) embedded.add(client);
  return client;
}

/** The gate of a client's reads, made on its first read with that read's limits. */
export function readGateOf(client: ClickHouseClient, limits: Pick<ReadLimits, 'maxConcurrentReads' | 'maxQueuedReads'>): ReadGate {
  let gate = gates.get(client);
  if (!gate) {
    gate = new ReadGate(embedded.has(client) ? 1 : limits.maxConcurrentReads, limits.maxQueuedReads);
    gates.set(client, gate);
  }
  return gate;
}

/** Whether a stopped read may leave rows on this client's connection (see `embedded`). */
export const leavesRowsWhenStopped = (client: ClickHouseClient) => embedded.has(client);
