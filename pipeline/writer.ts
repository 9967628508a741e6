import { Readable } from 'node:stream';
import {
  classifyClickHouseError,
  clickHouseFailureKind,
  DEFAULT_RETRY_POLICY,
  HoldscopeError,
  insertsBinaryBodies,
  retry,
  serverErrorOf,
  UnavailableError,
  type ClickHouseClient,
  type Logger,
  type RetryPolicy,
} from '../common/index.ts';
import type { PipelineMetrics } from './metrics.ts';
import {
  SPAN_COLUMNS,
  spanLineFields,
  TSV_INSERT_SETTINGS,
  type EncodedRows,
  type NativeRows,
  type RowEncoding,
  type TsvRows,
} from './encode.ts';
import { nativeSpanInsert } from './native.ts';
import { nativeSpanLines } from './native-read.ts';
import { LifecycleKeySet, refreshLifecycleRecords, type LifecycleKeyTuple } from './records.ts';

export interface SpanWriterOptions {
  client: ClickHouseClient;
  database: string;
  /** Rows per INSERT: large blocks are what ClickHouse inserts fastest. */
  maxBatchRows: number;
  /** How long rows wait for more before an INSERT (ms). */
  lingerMs: number;
  /** Least time between the starts of two record refreshes (ms), 0 when omitted: rounds further apart take more batches each. */
  refreshIntervalMs?: number;
  /** Pauses between retries of a failed INSERT or refresh: DEFAULT_RETRY_POLICY (250 ms doubling to 5 s, jittered) when omitted. */
  retry?: RetryPolicy;
  metrics: PipelineMetrics;
  log: Logger;
  /**
   * Told as soon as a record refresh statement has stored its lifecycles' records, and so their flags (the violation push
   * looks up at once), before their hold minutes; again if a retry stores them again. Called synchronously and must not block;
   * what it throws is logged and ignored.
   */
  onRecordsStored?: () => void;
}

interface Waiter {
  resolve: () => void;
  reject: (error: Error) => void;
}

interface Pending extends Waiter {
  batch: EncodedRows;
}

/** Longest ClickHouse message kept with a dead letter: parse errors quote the input around the fault. */
const MAX_DEAD_LETTER_MESSAGE_CHARS = 4000;

/** A row ClickHouse refused on its own (a TabSeparated line with its newline), and its answer. */
interface DeadLetter {
  line: string;
  error: HoldscopeError;
}

/**
 * For `retry`: everything but ClickHouse refusing the content is retried. A `setup` failure (a missing table, a refused
 * login, a full disk) is not the rows' doing: the same rows go in once an operator acts, and splitting the batch would
 * dead-letter every one of them.
 */
const retryUnlessContent =
  (doing: string) =>
  (error: unknown): HoldscopeError => {
    const failure = classifyClickHouseError(error, doing);
    if (failure.retriable || clickHouseFailureKind(error) !== 'setup') return failure;
    return new UnavailableError(failure.message, { cause: error, code: failure.code });
  };

/** For `retry`: every failure is retried (see refreshRecords). */
const retryAlways =
  (doing: string) =>
  (error: unknown): HoldscopeError => {
    const failure = classifyClickHouseError(error, doing);
    return failure.retriable ? failure : new UnavailableError(failure.message, { cause: error, code: failure.code });
  };

/** One INSERT's rows: several batches' texts or blocks, sent one after another (Native blocks follow each other in a stream). */
type EncodedData = { format: 'TabSeparated'; chunks: string[] } | { format: 'Native'; chunks: Buffer[] };

/** The batches' data, all of one encoding (insertPending takes them so). */
function encodedData(batches: EncodedRows[]): EncodedData {
  if (batches.every((b): b is NativeRows => b.format === 'Native')) return { format: 'Native', chunks: batches.map((b) => b.block) };
  if (batches.every((b): b is TsvRows => b.format === 'TabSeparated'))
    return { format: 'TabSeparated', chunks: batches.map((b) => b.text) };
  throw new Error('one INSERT of rows in two encodings');
}

/** The rows of TabSeparated texts, each line with its newline (a newline inside a field is escaped, never raw). */
const linesOf = (texts: string[]): string[] =>
  texts.flatMap((text) => (text.match(/[^\n]*\n|[^\n]+$/g) ?? []).map((line) => (line.endsWith('\n') ? line : `${line}\n`)));

/** A span_dead_letters row (migration 0011) for a refused line. */
function deadLetterRow({ line, error }: DeadLetter) {
  const columns = spanLineFields(line);
  const server = serverErrorOf(error);
  return {
    cluster: columns.cluster ?? '',
    request_id: columns.request_id ?? '',
    generation: columns.generation ?? '',
    name: columns.name ?? '',
    trace_id: columns.trace_id ?? '',
    span_id: columns.span_id ?? '',
    columns,
    row: line.replace(/\n$/, ''),
    error_code: Number(server?.code ?? 0),
    error_name: server?.type ?? error.code,
    error_message: (server?.message ?? error.message).slice(0, MAX_DEAD_LETTER_MESSAGE_CHARS),
  };
}

interface RefreshRequest {
  keys: LifecycleKeyTuple[];
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

/**
 * Takes queued items from the front while their total size stays within `max` (always at least one), and, given
 * `alike`, while they are alike the first.
 */
function takeUpTo<T>(
  queue: T[],
  max: number,
  sizeOf: (item: T) => number,
  alike = (_first: T, _next: T) => true,
): { taken: T[]; size: number } {
  const taken: T[] = [];
  let size = 0;
  while (queue.length > 0 && (taken.length === 0 || (size + sizeOf(queue[0] as T) <= max && alike(taken[0] as T, queue[0] as T)))) {
    const next = queue.shift() as T;
    taken.push(next);
    size += sizeOf(next);
  }
  return { taken, size };
}

/**
 * Coalesces rows from concurrent callers (Kafka partitions, collector requests) into large INSERTs into
 * `spans` (whose materialized view feeds the lifecycle states), then recomputes the stored records of the
 * lifecycles those rows belong to. `write` resolves only after ClickHouse has acknowledged both. Failures are told
 * apart by ClickHouse error code (common/clickhouse.ts, ClickHouseFailureKind): while ClickHouse is down, busy or
 * misconfigured the writer retries with backoff and jitter (common/retry.ts), so callers simply wait and memory stays
 * bounded by what they hold; rows ClickHouse refuses for their content are found by splitting the INSERT and go to
 * `span_dead_letters` (migration 0011), so that they hold up nobody. `shutdown` ends the retries at once.
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
  /** Aborted by shutdown: ends every retry loop and pause at once. */
  private readonly stopping = new AbortController();
  /** performance.now() when the last refresh round began. */
  private lastRefreshStart = -Infinity;
  /** performance.now() of the last write, and INSERTs under way: whether more rows are on their way to a round. */
  private lastWriteAt = -Infinity;
  private insertsRunning = 0;
  /** Ends the wait of a round for its interval early, to look again (an INSERT ended) or to stop (shutdown). */
  private wakeRefresh: (() => void) | undefined;

  /** The encoding this writer's rows should come in (any is stored): Native, unless the connection cannot send bytes. */
  readonly rowEncoding: RowEncoding;

  constructor(private readonly options: SpanWriterOptions) {
    this.rowEncoding = insertsBinaryBodies(options.client) ? 'Native' : 'TabSeparated';
  }

  /**
   * Resolves once every row is in ClickHouse: in `spans`, or, for rows ClickHouse refuses for their content, in
   * `span_dead_letters`. Rejects only once the writer stops.
   */
  write(batch: EncodedRows): Promise<void> {
    if (batch.rows === 0) return Promise.resolve();
    if (this.stopping.signal.aborted) return Promise.reject(new UnavailableError('the span writer has stopped: rows not stored'));
    this.lastWriteAt = performance.now();
    return new Promise((resolve, reject) => {
      this.pending.push({ batch, resolve, reject });
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
      // One INSERT holds one encoding: the pipeline's rows are all Native, rows from SpanRow objects TabSeparated.
      const { taken: batch, size: count } = takeUpTo(
        this.pending,
        this.options.maxBatchRows,
        (p) => p.batch.rows,
        (first, next) => first.batch.format === next.batch.format,
      );
      this.insertsRunning++;
      try {
        await this.store(encodedData(batch.map((p) => p.batch)), count);
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
      const waiters: Waiter[] = batch.map(({ resolve, reject }) => ({ resolve, reject }));
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
        await this.refreshRecords(
          keys.values(),
          rows,
          taken.flatMap((r) => r.waiters),
        );
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
      if (now >= dueAt || this.stopping.signal.aborted) return;
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

  /**
   * Refreshes the records of a stored batch's lifecycles, then releases its writers. Never rejects. Every failure is
   * retried: the rows are stored already and the statement is ours, so a failure that is not transient is our SQL or
   * schema (a missing table, a server without a function), not the batch. Retrying holds the batches' offsets: the
   * pipeline stalls visibly (HoldscopePipelineStalled, errors in the log), loses nothing, and resumes once the fix is in
   * (a migrate, a release). Releasing the writers instead would move the offsets past lifecycles whose stored records,
   * what the flags and alerts read, then stay wrong without a sign.
   */
  private async refreshRecords(keys: LifecycleKeyTuple[], rows: number, waiters: Waiter[]): Promise<void> {
    const doing = `refreshing the records of ${keys.length} lifecycles`;
    try {
      await retry(
        async () => {
          const stopTimer = this.options.metrics.refreshSeconds.startTimer();
          await refreshLifecycleRecords(this.options.client, this.options.database, keys, () => this.recordsStored());
          stopTimer();
        },
        {
          policy: this.options.retry ?? DEFAULT_RETRY_POLICY,
          signal: this.stopping.signal,
          classify: retryAlways(doing),
          onRetry: this.onRetry(doing),
        },
      );
    } catch (error) {
      for (const w of waiters) w.reject(error as Error);
      return;
    } finally {
      this.pendingRows = Math.max(0, this.pendingRows - rows);
      this.options.metrics.rowsPending.set(this.pendingRows);
    }
    for (const w of waiters) w.resolve();
  }

  private recordsStored(): void {
    try {
      this.options.onRecordsStored?.();
    } catch (error) {
      this.options.log.warn({ err: (error as Error).message }, 'records-stored listener threw; ignored');
    }
  }

  /**
   * Stores a batch's rows in `spans`. When ClickHouse refuses them for their content, they are inserted in halves, and
   * halves of the halves that fail, until every refused row failed on its own: the others are in `spans`, those go to
   * `span_dead_letters`. Rows of several writers share the batch, and the halves cut across writers. Rejects only once
   * the writer stops.
   */
  private async store(data: EncodedData, rows: number): Promise<void> {
    let refusal: HoldscopeError;
    try {
      await this.insertRows(data, rows);
      return;
    } catch (error) {
      refusal = this.refusal(error);
    }
    this.options.log.warn(
      { err: refusal.message, rows },
      'ClickHouse refused the rows of an INSERT; inserting them in halves to find the refused ones',
    );
    // Halves are inserted as text: one row's line is what a dead letter keeps, and the rare path need not be fast.
    const lines = data.format === 'Native' ? data.chunks.flatMap((block) => nativeSpanLines(block)) : linesOf(data.chunks);
    await this.storeDeadLetters(await this.isolateRefused(lines));
  }

  /**
   * Given `lines` ClickHouse refused together, inserts their halves, splitting those it refuses again;
   * returns the rows it refused on their own. Costs two INSERTs per halving on the way to each refused row (32 for one
   * row in 50,000), small ones after the first few.
   */
  private async isolateRefused(lines: string[]): Promise<DeadLetter[]> {
    if (lines.length === 1) return this.confirmRefused(lines[0] as string);
    const dead: DeadLetter[] = [];
    const half = Math.ceil(lines.length / 2);
    for (const part of [lines.slice(0, half), lines.slice(half)]) {
      try {
        await this.insertRows({ format: 'TabSeparated', chunks: [part.join('')] }, part.length);
      } catch (error) {
        this.refusal(error); // rethrows what is not a refusal
        dead.push(...(await this.isolateRefused(part)));
      }
    }
    return dead;
  }

  /**
   * A row refused on its own is asked once more before it is taken for refused: a refusal for its content repeats, while
   * a code ClickHouse also gives for a cut connection does not (32, ATTEMPT_TO_READ_AFTER_EOF, is both a value too short
   * to parse and a Distributed INSERT whose replica died mid-packet). Good rows never go to the dead letters for a
   * replica's death.
   */
  private async confirmRefused(line: string): Promise<DeadLetter[]> {
    try {
      await this.insertRows({ format: 'TabSeparated', chunks: [line] }, 1);
      return [];
    } catch (error) {
      return [{ line, error: this.refusal(error) }];
    }
  }

  /** A failed INSERT's error when ClickHouse refused the rows' content (counted); anything else is rethrown. */
  private refusal(error: unknown): HoldscopeError {
    // Retries only end this way once the writer stops: its callers then learn their rows were not stored.
    if (this.stopping.signal.aborted || !(error instanceof HoldscopeError) || error.retriable) throw error;
    this.options.metrics.insertFailures.inc({ retriable: 'false' });
    return error;
  }

  /** One INSERT into spans, retried with backoff unless ClickHouse refuses the content or the writer stops. */
  private async insertRows(data: EncodedData, rows: number): Promise<void> {
    const { client, database, metrics } = this.options;
    const doing = `inserting ${rows} span rows`;
    await retry(
      async () => {
        const stopTimer = metrics.insertSeconds.startTimer();
        const values = Readable.from(data.chunks, { objectMode: false });
        if (data.format === 'TabSeparated')
          await client.insert({
            table: `${database}.spans`,
            values,
            format: 'TabSeparated',
            columns: [...SPAN_COLUMNS],
            clickhouse_settings: TSV_INSERT_SETTINGS,
          });
        else {
          const result = await client.exec({ query: nativeSpanInsert(database), values });
          for await (const _ of result.stream); // an INSERT answers nothing; read to the end, which frees the connection
        }
        stopTimer();
      },
      {
        policy: this.options.retry ?? DEFAULT_RETRY_POLICY,
        signal: this.stopping.signal,
        classify: retryUnlessContent(doing),
        onRetry: this.onRetry(doing),
      },
    );
    metrics.rowsInserted.inc(rows);
    metrics.lastInsert.set(Date.now() / 1000);
  }

  /**
   * Keeps refused rows in span_dead_letters (retried like an INSERT into spans) and counts them. Should ClickHouse refuse
   * those rows too (every column is a String but the code: not expected), they are logged instead, so that they block
   * nothing either.
   */
  private async storeDeadLetters(dead: DeadLetter[]): Promise<void> {
    if (dead.length === 0) return;
    const { client, database, metrics, log } = this.options;
    const values = dead.map(deadLetterRow);
    const doing = `storing ${dead.length} dead letters`;
    let kept = true;
    try {
      await retry(() => client.insert({ table: `${database}.span_dead_letters`, values, format: 'JSONEachRow' }).then(() => undefined), {
        policy: this.options.retry ?? DEFAULT_RETRY_POLICY,
        signal: this.stopping.signal,
        classify: retryUnlessContent(doing),
        onRetry: this.onRetry(doing),
      });
    } catch (error) {
      const refusal = this.refusal(error);
      kept = false;
      log.error(
        { err: refusal.message, deadLetters: values.map((v) => v.row.slice(0, 2000)) },
        'ClickHouse refused the dead letters too; logged here instead',
      );
    }
    for (const v of values) metrics.deadLetterRows.inc({ code: String(v.error_code), error: v.error_name });
    log.error(
      {
        rows: dead.length,
        errors: [...new Set(values.map((v) => `${v.error_code} ${v.error_name}`))],
        first: values[0]?.error_message.slice(0, 500),
      },
      `ClickHouse refused ${dead.length} span row${dead.length === 1 ? '' : 's'} for their content; ${kept ? `kept in ${database}.span_dead_letters` : 'logged'}, the other rows are stored`,
    );
  }

  /** Counts and logs a failure that will be retried. */
  private onRetry(doing: string) {
    return async (failure: HoldscopeError, pauseMs: number, tries: number): Promise<void> => {
      const transient = clickHouseFailureKind(failure) === 'transient';
      this.options.metrics.insertFailures.inc({ retriable: String(transient) });
      // What is not transient waits for an operator (a schema, a login, a disk): said as an error.
      this.options.log[transient ? 'warn' : 'error'](
        { err: failure.message, attempt: tries, retryInMs: pauseMs },
        `${doing} failed; retrying`,
      );
    };
  }

  /**
   * Stops: retry loops and their pauses end at once, what is pending gets one more try, and the writers of rows not
   * stored by then are rejected (so nothing of theirs is committed). Requests already sent to ClickHouse are not
   * aborted (they end by the client's request timeout); a caller that must stop by a deadline bounds this (stopWithin).
   */
  async shutdown(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.stopping.abort();
    this.wakeRefresh?.();
    await this.flush().catch(() => undefined);
  }
}
