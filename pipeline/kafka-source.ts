import kafkajs, { type Consumer, type Kafka } from 'kafkajs';
import type { Logger } from '../common/index.ts';
import type { SpanTimeWindow } from '../contract/index.ts';
import { DEFAULT_MAX_IN_FLIGHT_BYTES, DEFAULT_REBALANCE_TIMEOUT_MS } from './config.ts';
import { encodedBytes, type EncodedRows } from './encode.ts';
import { rowsOf } from './ingest.ts';
import type { PipelineMetrics } from './metrics.ts';
import type { SpanWriter } from './writer.ts';

const { KafkaJSProtocolError } = kafkajs;

export interface KafkaSourceOptions {
  kafka: Kafka;
  groupId: string;
  topics: string[];
  writer: SpanWriter;
  metrics: PipelineMetrics;
  log: Logger;
  /** Partitions processed at once; their rows share INSERTs. */
  partitionsConsumedConcurrently: number;
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  /**
   * How long the group waits for members to rejoin in a rebalance; a join (and a SIGTERM during one) waits up to this
   * plus 5 s. Default: the pipeline configuration's (`rebalanceTimeoutMs`).
   */
  rebalanceTimeoutMs?: number;
  /** Longest a fetch waits for data (ms); default 500. */
  fetchMaxWaitMs?: number;
  /** Bytes fetched per partition per request: with the concurrency, this bounds memory. */
  maxBytesPerPartition: number;
  /** Pause before recreating a consumer that crashed and that kafkajs does not restart itself (default 2 s). */
  restartDelayMs?: number;
  /**
   * Bytes of encoded rows handed to the writer and not yet acknowledged by ClickHouse past which no more batches are
   * taken (they wait, heartbeating). Default: the pipeline configuration's (`maxInFlightBytes`).
   */
  maxInFlightBytes?: number;
  /** The time rule applied to each batch's spans as it is read (clock skew, retention); none when absent. */
  timeWindow?: () => SpanTimeWindow;
}

const RESTART_DELAY_MS = 2000;

/**
 * Why the group refused an offset commit, when it refused it because this member's view of the group is out of date
 * (a rebalance is under way, its generation or member id is stale, the coordinator moved): `rejoin` says whether the
 * member must rejoin the group before it can commit again. Anything else (say, Kafka unreachable) is not a refusal.
 * Told apart by the protocol error's `type`, looked up through the wrappers kafkajs's retries put around it.
 */
const REFUSALS: Record<string, { rejoin: boolean }> = {
  REBALANCE_IN_PROGRESS: { rejoin: true },
  ILLEGAL_GENERATION: { rejoin: true },
  UNKNOWN_MEMBER_ID: { rejoin: true },
  NOT_COORDINATOR_FOR_GROUP: { rejoin: true }, // Kafka's NOT_COORDINATOR
  GROUP_COORDINATOR_NOT_AVAILABLE: { rejoin: false }, // COORDINATOR_NOT_AVAILABLE
  COORDINATOR_LOAD_IN_PROGRESS: { rejoin: false },
};

export interface CommitRefusal {
  /** The kafkajs protocol error type, e.g. REBALANCE_IN_PROGRESS. */
  type: string;
  rejoin: boolean;
  /** The protocol error itself, unwrapped: what kafkajs's consumer loop recognises as a reason to rejoin. */
  error: Error;
}

/** The group's refusal inside `error` (a commitOffsets failure), or undefined when the commit failed for another reason. */
export function commitRefusal(error: unknown): CommitRefusal | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = error; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (e instanceof KafkaJSProtocolError) {
      const refusal = REFUSALS[e.type];
      return refusal ? { type: e.type, rejoin: refusal.rejoin, error: e } : undefined;
    }
  }
  return undefined;
}

/**
 * Why a consumer crashed, for the restart counter's `reason` label: the kafkajs protocol error type inside the error
 * (e.g. INVALID_REQUEST for a group sync the coordinator rejected), else the innermost error's name.
 */
export function crashReason(error: unknown): string {
  const seen = new Set<unknown>();
  let innermost: Error | undefined;
  for (let e: unknown = error; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (e instanceof KafkaJSProtocolError) return e.type;
    innermost = e;
  }
  return innermost?.name ?? 'unknown';
}

/** A batch handed to the writer, as its partition's commit order needs it: never the batch or its rows. */
interface HandedBatch {
  /** The offset to commit once this batch and every earlier one of its partition are stored: its last offset + 1. */
  readonly next: string;
  stored: boolean;
}

/** One partition's batches not yet committable, in the order they were handed to the writer (oldest first). */
interface PartitionLine {
  readonly topic: string;
  readonly partition: number;
  readonly batches: HandedBatch[];
}

type Offset = { topic: string; partition: number; offset: string };

/**
 * What a consumer fetches at most: per partition, and per broker the partitions it processes at once (fetched
 * messages are Buffers outside the V8 heap limit, so this bounds them).
 */
export function fetchByteLimits(
  maxBytesPerPartition: number,
  partitionsConsumedConcurrently: number,
): { maxBytesPerPartition: number; maxBytes: number } {
  return { maxBytesPerPartition, maxBytes: maxBytesPerPartition * Math.max(1, partitionsConsumedConcurrently) };
}

/**
 * A consumer group member that turns each fetched batch into span rows, hands them to the writer and moves its
 * fetch position on at once, so that fetching and decoding the next batches overlap the INSERT. The group's
 * committed offset for a partition moves only once ClickHouse has acknowledged the rows of that batch and of every
 * earlier batch of the partition: a crash before the commit means the batches are read again, which changes nothing
 * downstream (the storage is idempotent under duplicates); so does a commit the group refuses during a rebalance,
 * which is why a refusal is counted and the member simply rejoins.
 *
 * Memory is bounded by `maxInFlightBytes` of rows handed to the writer and not yet acknowledged: past it, batches wait
 * (unresolved, heartbeating) before they are decoded, and kafkajs fetches nothing more than the batches in hand.
 *
 * `start` and `shutdown` may be called once each; `shutdown` is safe at any moment, including while a start or a
 * restart after a crash is in progress (it waits for that to notice, then stops what it created).
 */
export class KafkaSource {
  private consumer: Consumer | undefined;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  /** A crashed consumer is being replaced: further crash events are not news. */
  private restartPending = false;
  private restartTimer: NodeJS.Timeout | undefined;
  /** The start or restart in progress, if any: `shutdown` waits for it. */
  private starting: Promise<void> | undefined;
  /** What the consumer is doing, for `status()`. */
  private phase = 'not started';
  private batchesInHand = 0;
  private readonly maxInFlightBytes: number;
  /** Rows handed to the writer and not yet acknowledged (or refused): what bounds memory. */
  private inFlightWrites = 0;
  private inFlightBytes = 0;
  /** Woken whenever a write settles or the source stops: batches waiting for room, a shutdown waiting for writes. */
  private waiters: (() => void)[] = [];
  /**
   * Per partition (`topic:partition`), the batches whose offsets are not committable yet. Replaced whenever the group
   * rebalances or the consumer is replaced: the new owner of a partition reads from its committed offset, so what
   * was handed before is never committed after (committing it would be safe, as its rows are stored, but would move
   * the group's offset back behind what the partition's new owner committed).
   */
  private lines = new Map<string, PartitionLine>();
  /** Bumped with `lines`: a commit answer from an earlier generation is not news. */
  private generation = 0;
  /** Per partition, the offset up to which every message is stored, for the next commit. */
  private readonly committable = new Map<string, Offset>();
  /** The commit request in flight (one at a time, carrying the latest committable offset of every partition). */
  private committing: Promise<void> | undefined;
  /** The group refused a commit and wants this member to rejoin: the next batch ends with this error. */
  private rejoinWith: Error | undefined;

  constructor(private readonly options: KafkaSourceOptions) {
    this.maxInFlightBytes = options.maxInFlightBytes ?? DEFAULT_MAX_IN_FLIGHT_BYTES;
  }

  /** What the consumer is doing now, in words (for a shutdown that takes too long). */
  /** In its group and fetching: what /readyz of `holdscope pipeline` reports. */
  consuming(): boolean {
    return this.phase === 'consuming';
  }

  status(): string {
    const inHand = `${this.phase}; ${this.batchesInHand} batch${this.batchesInHand === 1 ? '' : 'es'} in hand`;
    if (this.inFlightWrites === 0) return inHand;
    return `${inHand}; ${this.inFlightWrites} written (${(this.inFlightBytes / 2 ** 20).toFixed(1)} MiB) awaiting ClickHouse's acknowledgement`;
  }

  start(): Promise<void> {
    return this.track(this.startConsumer());
  }

  private track(work: Promise<void>): Promise<void> {
    const tracked: Promise<void> = work.finally(() => {
      if (this.starting === tracked) this.starting = undefined;
    });
    this.starting = tracked;
    return tracked;
  }

  private async startConsumer(): Promise<void> {
    if (this.stopping) return;
    const { kafka, groupId, topics, metrics, log } = this.options;
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: this.options.sessionTimeoutMs,
      rebalanceTimeout: this.options.rebalanceTimeoutMs ?? DEFAULT_REBALANCE_TIMEOUT_MS,
      maxWaitTimeInMs: this.options.fetchMaxWaitMs ?? 500,
      heartbeatInterval: this.options.heartbeatIntervalMs,
      ...fetchByteLimits(this.options.maxBytesPerPartition, this.options.partitionsConsumedConcurrently),
    });
    this.consumer = consumer;
    this.newGeneration();
    const current = () => this.consumer === consumer && !this.stopping;
    this.phase = 'connecting to Kafka';
    consumer.on(consumer.events.GROUP_JOIN, () => {
      if (this.consumer === consumer) this.newGeneration();
      if (current()) this.phase = 'consuming';
    });
    consumer.on(consumer.events.REBALANCING, () => {
      if (this.consumer === consumer) this.newGeneration();
      if (current()) this.phase = 'rejoining the group (rebalance)';
    });
    let crashed = false;
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      crashed = true;
      // kafkajs restarts by itself after retriable errors; after others (e.g. a failed group sync) it stops.
      if (payload.restart || !current() || this.restartPending) return;
      const reason = crashReason(payload.error);
      metrics.consumerRestarts.inc({ reason });
      this.phase = 'restarting after a crash';
      log.error({ err: payload.error?.message, reason }, 'consumer crashed; restarting');
      this.scheduleRestart();
    });
    await consumer.connect();
    // A shutdown that came meanwhile disconnects this consumer once start returns: give it no group membership.
    if (this.stopping) return;
    await consumer.subscribe({ topics, fromBeginning: true });
    if (this.stopping) return;
    this.phase = 'joining the group';
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.options.partitionsConsumedConcurrently,
      eachBatch: async ({ batch, heartbeat, isRunning, isStale, resolveOffset }) => {
        if (batch.messages.length === 0) return;
        this.batchesInHand++;
        try {
          this.throwIfRejoining();
          await this.waitForRoom(heartbeat);
          this.throwIfRejoining();
          // Left unresolved, the batch is fetched again, by this member or by the partition's next owner.
          if (!current() || !isRunning() || isStale()) return;
          // With their headers: the collector's declare the encoding, which is then never guessed from the bytes.
          const rows = rowsOf(batch.messages, this.options.writer.rowEncoding, metrics, log, this.options.timeWindow?.());
          const lastOffset = batch.lastOffset();
          this.hand(rows, batch.topic, batch.partition, lastOffset);
          // The fetch position moves on now; the group's committed offset only once ClickHouse has the rows.
          resolveOffset(lastOffset);
        } finally {
          this.batchesInHand--;
        }
      },
    });
    // run() also returns when the first join failed (the crash handler has it in hand).
    if (!crashed) log.info({ topics, groupId }, 'consuming');
  }

  /** What was handed to the writer so far is not committed by this member from now on (see `lines`). */
  private newGeneration(): void {
    this.generation++;
    this.lines = new Map();
    this.committable.clear();
    this.rejoinWith = undefined;
  }

  /** A refused commit asked for a rejoin: kafkajs's consumer loop rejoins when a batch ends with the bare protocol error. */
  private throwIfRejoining(): void {
    if (this.rejoinWith) throw this.rejoinWith;
  }

  private wake(): void {
    for (const wake of this.waiters.splice(0)) wake();
  }

  private waitForChange(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /**
   * Resolves once the rows in flight are under `maxInFlightBytes` (at once when they are) or the source stops.
   * Meanwhile the member heartbeats; a heartbeat that finds the group rebalancing ends the wait with its error, so
   * that kafkajs rejoins now rather than once ClickHouse caught up, past the rebalance timeout.
   */
  private async waitForRoom(heartbeat: () => Promise<void>): Promise<void> {
    if (this.inFlightBytes < this.maxInFlightBytes) return;
    let rebalancing: Error | undefined;
    const beat = setInterval(() => {
      heartbeat().catch((error: unknown) => {
        const refusal = commitRefusal(error);
        if (!refusal?.rejoin) return;
        rebalancing = refusal.error;
        this.wake();
      });
    }, this.options.heartbeatIntervalMs);
    try {
      while (this.inFlightBytes >= this.maxInFlightBytes && !this.stopping && !rebalancing) await this.waitForChange();
    } finally {
      clearInterval(beat);
    }
    if (rebalancing) throw rebalancing;
  }

  /**
   * Hands a batch's rows to the writer and queues its offset behind its partition's earlier batches. Only plain
   * values reach the callbacks: the rows are the writer's until ClickHouse has them, and the batch is nobody's.
   */
  private hand(rows: EncodedRows, topic: string, partition: number, lastOffset: string): void {
    const key = `${topic}:${partition}`;
    let line = this.lines.get(key);
    if (!line) {
      line = { topic, partition, batches: [] };
      this.lines.set(key, line);
    }
    const handed: HandedBatch = { next: (BigInt(lastOffset) + 1n).toString(), stored: false };
    line.batches.push(handed);
    const bytes = encodedBytes(rows);
    this.inFlightWrites++;
    this.inFlightBytes += bytes;
    this.options.metrics.inFlightBytes.set(this.inFlightBytes);
    const settledLine = line;
    void this.options.writer.write(rows).then(
      () => this.settle(key, settledLine, handed, bytes, true),
      () => this.settle(key, settledLine, handed, bytes, false),
    );
  }

  /** A write's outcome: room for more rows, and the partition's committable offset where its line allows. */
  private settle(key: string, line: PartitionLine, handed: HandedBatch, bytes: number, stored: boolean): void {
    this.inFlightWrites--;
    this.inFlightBytes -= bytes;
    this.options.metrics.inFlightBytes.set(this.inFlightBytes);
    this.wake();
    if (!stored) {
      // Only once the writer stopped (at shutdown): the batch stays at its line's head, so neither its offset nor
      // any later one of the partition is committed, and the partition's next owner reads them again.
      this.options.log.warn(
        { topic: line.topic, partition: line.partition },
        'rows not stored (the writer stopped); their offsets are not committed',
      );
      return;
    }
    handed.stored = true;
    let done: HandedBatch | undefined;
    while (line.batches[0]?.stored) done = line.batches.shift();
    if (!done || this.lines.get(key) !== line) return;
    if (line.batches.length === 0) this.lines.delete(key);
    this.committable.set(key, { topic: line.topic, partition: line.partition, offset: done.next });
    this.commitSoon();
  }

  /** Starts a commit of everything committable unless one is in flight (which starts the next one when it ends). */
  private commitSoon(): void {
    if (this.committing) return;
    const consumer = this.consumer;
    const offsets = [...this.committable.values()];
    this.committable.clear();
    if (!consumer || offsets.length === 0) return;
    this.committing = this.commit(consumer, offsets).then((ok) => {
      this.committing = undefined;
      // After a failure, the offsets put back wait for the next acknowledgement (or the shutdown's last commit).
      if (ok) this.commitSoon();
    });
  }

  /** Commits `offsets`; says whether the group took them. Never rejects. */
  private async commit(consumer: Consumer, offsets: Offset[]): Promise<boolean> {
    const { metrics, log } = this.options;
    const generation = this.generation;
    try {
      await consumer.commitOffsets(offsets);
      metrics.commits.inc();
      return true;
    } catch (error) {
      const refusal = commitRefusal(error);
      if (refusal) {
        // The rows are stored, their offsets are not: they are read again, by this member or by the partitions'
        // next owners, which changes nothing.
        metrics.commitsRefused.inc({ reason: refusal.type });
        log.warn(
          { partitions: offsets.length, reason: refusal.type },
          refusal.rejoin
            ? 'offset commit refused by the group (rebalance); rejoining, the batches will be read again'
            : 'offset commit refused by the group; retrying with the next commit',
        );
      } else {
        log.warn({ partitions: offsets.length, err: (error as Error).message }, 'offset commit failed; retrying with the next commit');
      }
      if (generation !== this.generation) return false;
      if (refusal?.rejoin) {
        // The bare protocol error, unlike the wrapper kafkajs's retries put around it, is one kafkajs's consumer loop
        // answers by rejoining the group (no crash, no restart). The rejoin starts a new generation: these are dropped.
        this.rejoinWith = refusal.error;
        return false;
      }
      // A later commit of the same partitions carries a later offset, which covers these.
      for (const o of offsets) {
        const key = `${o.topic}:${o.partition}`;
        if (!this.committable.has(key)) this.committable.set(key, o);
      }
      return false;
    }
  }

  /** Resolves when no write is in flight: each was acknowledged, or refused once the writer stopped. */
  private async writesSettled(): Promise<void> {
    while (this.inFlightWrites > 0) await this.waitForChange();
  }

  /** Commits what is committable now, including offsets a failed commit put back; resolves when no commit is in flight. */
  private async commitsSettled(): Promise<void> {
    await this.committing;
    this.commitSoon();
    while (this.committing) await this.committing;
  }

  private scheduleRestart(): void {
    this.restartPending = true;
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      void this.track(this.restart());
    }, this.options.restartDelayMs ?? RESTART_DELAY_MS);
  }

  /** Replaces the crashed consumer; never rejects (a failure schedules another attempt). */
  private async restart(): Promise<void> {
    if (this.stopping) return;
    const crashed = this.consumer;
    await crashed?.disconnect().catch(() => undefined);
    this.restartPending = false;
    // A shutdown during the disconnect has nothing left to stop: a consumer created now would keep the process up.
    if (this.stopping) return;
    try {
      await this.startConsumer();
    } catch (error) {
      if (this.stopping) return;
      this.options.log.error({ err: (error as Error).message }, 'consumer restart failed; trying again');
      this.scheduleRestart();
    }
  }

  /**
   * Stops fetching, waits until ClickHouse acknowledged (or the stopped writer refused) every write in flight, commits
   * what is stored, and leaves the group. Safe at any moment; idempotent.
   */
  shutdown(): Promise<void> {
    this.stopped ??= (async () => {
      this.stopping = true;
      this.wake(); // batches waiting for room end unresolved: they are read again
      if (this.restartTimer) clearTimeout(this.restartTimer);
      this.restartTimer = undefined;
      // kafkajs cannot stop a consumer that is still connecting or joining (its stop finds nothing running and the
      // join carries on): a start or restart in progress finishes first, stopping early once it sees `stopping`.
      if (this.starting) {
        this.phase = `waiting for a consumer start in progress (${this.phase})`;
        await this.starting.catch(() => undefined);
      }
      const consumer = this.consumer;
      const was = this.phase;
      this.phase = `finishing the writes in flight, committing and leaving the group${was === 'consuming' ? '' : ` (was ${was})`}`;
      // Stop fetching but stay in the group, whose commits only a member can make, until the writes are settled.
      try {
        consumer?.pause(this.options.topics.map((topic) => ({ topic })));
      } catch {
        // Not running (never joined, or crashed): nothing is fetched anyway.
      }
      await this.writesSettled();
      await this.commitsSettled();
      await consumer?.disconnect();
      this.phase = 'stopped';
    })();
    return this.stopped;
  }
}
