import kafkajs, { type Consumer, type Kafka } from 'kafkajs';
import type { Logger } from '../common/index.ts';
import { DEFAULT_REBALANCE_TIMEOUT_MS } from './config.ts';
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

/**
 * A consumer group member that turns each fetched batch into span rows, waits for ClickHouse to acknowledge
 * them, and only then commits the batch's offsets. A crash before the commit means the batch is read again,
 * which changes nothing downstream (the storage is idempotent under duplicates); so does a commit the group
 * refuses during a rebalance, which is why a refusal is counted and the member simply rejoins.
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

  constructor(private readonly options: KafkaSourceOptions) {}

  /** What the consumer is doing now, in words (for a shutdown that takes too long). */
  status(): string {
    return `${this.phase}; ${this.batchesInHand} batch${this.batchesInHand === 1 ? '' : 'es'} in hand`;
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
    const { kafka, groupId, topics, writer, metrics, log } = this.options;
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: this.options.sessionTimeoutMs,
      rebalanceTimeout: this.options.rebalanceTimeoutMs ?? DEFAULT_REBALANCE_TIMEOUT_MS,
      maxWaitTimeInMs: this.options.fetchMaxWaitMs ?? 500,
      heartbeatInterval: this.options.heartbeatIntervalMs,
      maxBytesPerPartition: this.options.maxBytesPerPartition,
      maxBytes: this.options.maxBytesPerPartition * Math.max(1, this.options.partitionsConsumedConcurrently),
    });
    this.consumer = consumer;
    const current = () => this.consumer === consumer && !this.stopping;
    this.phase = 'connecting to Kafka';
    consumer.on(consumer.events.GROUP_JOIN, () => {
      if (current()) this.phase = 'consuming';
    });
    consumer.on(consumer.events.REBALANCING, () => {
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
          const rows = rowsOf(
            batch.messages.map((m) => m.value),
            metrics,
            log,
          );
          // Rows may wait behind other partitions' INSERTs: keep the group membership alive meanwhile.
          const beat = setInterval(() => void heartbeat().catch(() => undefined), this.options.heartbeatIntervalMs);
          try {
            await writer.write(rows, heartbeat);
          } finally {
            clearInterval(beat);
          }
        } finally {
          this.batchesInHand--;
        }
        if (!isRunning() || isStale()) return;
        // Only now may the group's committed offset move past this batch, and the fetch position with it.
        const next = (BigInt(batch.lastOffset()) + 1n).toString();
        try {
          await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
        } catch (error) {
          const refusal = commitRefusal(error);
          if (!refusal) throw error;
          // The rows are stored, their offsets are not: the batch is read again, by this member or by the
          // partition's next owner, which changes nothing. The fetch position stays at the batch so that it is.
          metrics.commitsRefused.inc({ reason: refusal.type });
          log.warn(
            { topic: batch.topic, partition: batch.partition, offset: next, reason: refusal.type },
            refusal.rejoin ? 'offset commit refused by the group (rebalance); rejoining, the batch will be read again' : 'offset commit refused by the group; the batch will be read again',
          );
          // The bare protocol error, unlike the wrapper kafkajs's retries put around it, is one kafkajs's consumer
          // loop answers by rejoining the group: no crash, no restart. When no rejoin is needed, carry on.
          if (refusal.rejoin) throw refusal.error;
          return;
        }
        resolveOffset(batch.lastOffset());
        metrics.commits.inc();
      },
    });
    // run() also returns when the first join failed (the crash handler has it in hand).
    if (!crashed) log.info({ topics, groupId }, 'consuming');
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

  /** Stops consuming after the batches in hand and leaves the group. Safe at any moment; idempotent. */
  shutdown(): Promise<void> {
    this.stopped ??= (async () => {
      this.stopping = true;
      if (this.restartTimer) clearTimeout(this.restartTimer);
      this.restartTimer = undefined;
      // kafkajs cannot stop a consumer that is still connecting or joining (its stop finds nothing running and the
      // join carries on): a start or restart in progress finishes first, stopping early once it sees `stopping`.
      if (this.starting) {
        this.phase = `waiting for a consumer start in progress (${this.phase})`;
        await this.starting.catch(() => undefined);
      }
      const was = this.phase;
      this.phase = `finishing the batches in hand and leaving the group${was === 'consuming' ? '' : ` (was ${was})`}`;
      await this.consumer?.disconnect();
      this.phase = 'stopped';
    })();
    return this.stopped;
  }
}
