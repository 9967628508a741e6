import { CompressionTypes, Partitioners, type Kafka, type Message, type Producer } from 'kafkajs';
import { OverloadedError, retryable, success, UnavailableError, type Logger, type RetryableResult } from '../common/index.ts';
import type { CollectorMetrics } from './metrics.ts';
import { DEAD_LETTER_HEADERS, MESSAGE_HEADERS, type DeadLetter, type SpanMessage, type SpanQueue } from '../contract/index.ts';
import { BATCH_OVERHEAD_BYTES, recordBytes } from './messages.ts';
import { mergeByPartition } from './partitions.ts';

export interface KafkaSpanQueueOptions {
  kafka: Kafka;
  topic: string;
  deadLetterTopic: string;
  maxPendingSpans: number;
  /** Bytes of messages waiting for Kafka beyond which publishes are refused (429); unbounded when left out. */
  maxPendingBytes?: number;
  maxBatchSpans: number;
  /**
   * Most bytes one Kafka send carries (records with their framing, see recordBytes). A broker checks each
   * partition's record batch against its message.max.bytes, and a send may put all its records in one
   * partition, so this is the collector's maxMessageBytes. Default 1000000.
   */
  maxSendBytes?: number;
  lingerMs: number;
  maxInflightSends: number;
  produceTimeoutMs: number;
  metrics: CollectorMetrics;
  log: Logger;
}

interface Entry {
  /** Parts of this publish not yet acknowledged. */
  remaining: number;
  settle: (result: RetryableResult<void>) => void;
}

/** Some of one publish's messages, at most one send's worth of bytes: the unit a send is made of. */
interface Part {
  entry: Entry;
  messages: Message[];
  deadLetters: Message[];
  spans: number;
  bytes: number;
}

const OVERLOADED_RETRY_MS = 1000;
const UNAVAILABLE_RETRY_MS = 2000;
const RECONNECT_MS = 2000;
/** How often the span topic's partition count is asked again: partitions are added by hand, rarely. */
const PARTITIONS_REFRESH_MS = 60_000;
const UNKNOWN_PARTITIONS_RETRY_MS = 5000;

/**
 * Batches publishes from concurrent requests into few Kafka sends (acks from all in-sync replicas), with
 * bounds on spans and bytes waiting for Kafka: past them, callers are told to retry (429) instead of being
 * queued, or, once a send failed or timed out, that Kafka is unavailable (503) until it answers again.
 */
export class KafkaSpanQueue implements SpanQueue {
  private readonly producer: Producer;
  private readonly waiting: Part[] = [];
  private waitingSpans = 0;
  private waitingBytes = 0;
  private pendingSpans = 0;
  private pendingBytes = 0;
  /** Sends holding one of the maxInflightSends slots. */
  private inflight = 0;
  /** Sends not yet ended, stuck ones included: what flush waits for. */
  private sending = 0;
  private timer: NodeJS.Timeout | undefined;
  private connected = false;
  /** Why Kafka counts as down: the last send failed or a publish timed out. Cleared by a send that succeeds or a probe that reaches it. */
  private failing: string | undefined;
  private stopping = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private partitionsTimer: NodeJS.Timeout | undefined;
  /** The span topic's partition count, once Kafka told it. */
  private partitions: number | undefined;
  private readonly idle: (() => void)[] = [];
  private readonly maxSendBytes: number;
  private readonly maxPendingBytes: number;

  constructor(private readonly options: KafkaSpanQueueOptions) {
    this.maxSendBytes = options.maxSendBytes ?? 1_000_000;
    this.maxPendingBytes = options.maxPendingBytes ?? Infinity;
    this.producer = options.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: true,
      // A failed send is answered 503 and retried by the sender; kafkajs's own retries only smooth blips.
      retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    this.producer.on(this.producer.events.DISCONNECT, () => {
      this.connected = false;
      this.options.metrics.kafkaUp.set(0);
      this.scheduleReconnect();
    });
  }

  async start(): Promise<void> {
    await this.connect();
    // Known before the first send when Kafka is up; a collector starting without Kafka does not wait for it.
    const learning = this.refreshPartitions();
    if (this.connected) await learning;
  }

  private async connect(): Promise<void> {
    if (this.stopping) return;
    try {
      await this.producer.connect();
      this.connected = true;
      if (!this.failing) this.options.metrics.kafkaUp.set(1);
      this.options.log.info('connected to Kafka');
    } catch (error) {
      this.options.log.warn({ err: (error as Error).message }, 'Kafka unreachable; answering 503 until it is back');
      this.scheduleReconnect();
    }
  }

  private scheduleReconnect(): void {
    if (this.stopping || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (!this.connected) void this.connect();
    }, RECONNECT_MS);
    this.reconnectTimer.unref();
  }

  private markFailing(reason: string): void {
    if (!this.failing)
      this.options.log.warn({ reason }, 'Kafka is failing; answering 503 past the pending limits and not ready until it answers again');
    this.failing = reason;
    this.options.metrics.kafkaUp.set(0);
    this.scheduleProbe();
  }

  private markWorking(): void {
    if (this.failing) this.options.log.info('Kafka answers again');
    this.failing = undefined;
    this.options.metrics.kafkaUp.set(this.connected ? 1 : 0);
  }

  /**
   * While Kafka is failing, asks it for the topic's metadata every RECONNECT_MS: readiness must come back
   * even when no sender is left to prove it (a load balancer stops sending to an instance that is not ready).
   */
  private scheduleProbe(): void {
    if (this.stopping || this.probeTimer) return;
    this.probeTimer = setTimeout(() => {
      this.probeTimer = undefined;
      void this.probe();
    }, RECONNECT_MS);
    this.probeTimer.unref();
  }

  private async probe(): Promise<void> {
    if (!this.failing || this.stopping) return;
    try {
      this.learnedPartitions(await this.topicPartitions());
      if (this.failing && this.connected) this.markWorking();
    } catch {
      // Still down: the next probe tells.
    } finally {
      if (this.failing) this.scheduleProbe();
    }
  }

  /** The topic's partitions, asked of Kafka by an admin client of its own within produceTimeoutMs. */
  private async topicPartitions(): Promise<number> {
    const admin = this.options.kafka.admin({ retry: { retries: 0 } });
    let timeout: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        (async () => {
          await admin.connect();
          const { topics } = await admin.fetchTopicMetadata({ topics: [this.options.topic] });
          return topics.find((t) => t.name === this.options.topic)?.partitions.length ?? 0;
        })(),
        new Promise<never>((_, reject) => {
          timeout = setTimeout(() => reject(new Error('metadata request timed out')), this.options.produceTimeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timeout);
      await admin.disconnect().catch(() => undefined);
    }
  }

  /** Sends merge span messages per partition once the count is known (partitions.ts); until then kafkajs partitions them. */
  private learnedPartitions(count: number): void {
    if (count <= 0 || count === this.partitions) return;
    this.options.log.info({ topic: this.options.topic, partitions: count }, 'span messages are merged per partition');
    this.partitions = count;
  }

  /**
   * Asks for the topic's partitions now and every PARTITIONS_REFRESH_MS (UNKNOWN_PARTITIONS_RETRY_MS until known): a
   * topic may gain partitions, or be created by the first send.
   */
  private async refreshPartitions(): Promise<void> {
    if (this.stopping) return;
    try {
      this.learnedPartitions(await this.topicPartitions());
    } catch (error) {
      this.options.log.debug({ err: (error as Error).message }, "could not learn the span topic's partitions; sends stay unmerged");
    }
    if (this.stopping) return;
    const nextMs = this.partitions ? PARTITIONS_REFRESH_MS : UNKNOWN_PARTITIONS_RETRY_MS;
    this.partitionsTimer = setTimeout(() => void this.refreshPartitions(), nextMs);
    this.partitionsTimer.unref();
  }

  /** Connected, and no send failed or timed out since Kafka last answered. */
  healthy(): boolean {
    return this.connected && !this.failing;
  }

  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    if (messages.length === 0 && deadLetters.length === 0) return Promise.resolve(success(undefined));
    const spans = messages.reduce((n, m) => n + m.spans, 0) + deadLetters.length;
    if (this.stopping || !this.connected) {
      this.options.metrics.spansRefused.inc({ reason: 'kafka_unavailable' }, spans);
      return Promise.resolve(retryable(new UnavailableError('Kafka is unreachable', { retryAfterMs: UNAVAILABLE_RETRY_MS })));
    }
    // Parts of at most one send's worth of bytes, spans before dead letters.
    const entry: Entry = { remaining: 0, settle: () => undefined };
    const parts: Part[] = [];
    let part: Part | undefined;
    let bytes = 0;
    const add = (message: Message, headers: Readonly<Record<string, string>>, spanCount: number, dead: boolean) => {
      const size = recordBytes(message.key as string | null, (message.value as Buffer).length, headers);
      if (!part || (part.bytes > 0 && part.bytes + size > this.maxSendBytes - BATCH_OVERHEAD_BYTES)) {
        parts.push((part = { entry, messages: [], deadLetters: [], spans: 0, bytes: 0 }));
      }
      (dead ? part.deadLetters : part.messages).push(message);
      part.spans += spanCount;
      part.bytes += size;
      bytes += size;
    };
    for (const m of messages) add({ key: m.key, value: m.value, headers: MESSAGE_HEADERS }, MESSAGE_HEADERS, m.spans, false);
    for (const d of deadLetters) add({ key: d.key, value: d.value, headers: DEAD_LETTER_HEADERS }, DEAD_LETTER_HEADERS, 1, true);
    // The byte bound admits a lone request of any size: triage bounds one request's bytes on its own.
    if (
      this.pendingSpans + spans > this.options.maxPendingSpans ||
      (this.pendingBytes > 0 && this.pendingBytes + bytes > this.maxPendingBytes)
    ) {
      if (this.failing) {
        // What waits is stuck on Kafka, not on a burst: the sender should hear that Kafka is down.
        this.options.metrics.spansRefused.inc({ reason: 'kafka_unavailable' }, spans);
        return Promise.resolve(
          retryable(
            new UnavailableError(`Kafka is unavailable (${this.failing}); ${this.pendingSpans} spans wait for it`, {
              retryAfterMs: UNAVAILABLE_RETRY_MS,
            }),
          ),
        );
      }
      this.options.metrics.spansRefused.inc({ reason: 'overloaded' }, spans);
      return Promise.resolve(
        retryable(
          new OverloadedError(`collector overloaded: ${this.pendingSpans} spans (${this.pendingBytes} bytes) waiting for Kafka`, {
            retryAfterMs: OVERLOADED_RETRY_MS,
          }),
        ),
      );
    }
    this.pendingSpans += spans;
    this.pendingBytes += bytes;
    this.options.metrics.pendingSpans.set(this.pendingSpans);
    return new Promise((resolve) => {
      let settled = false;
      const deadline = setTimeout(() => {
        // Kafka may still take the messages later: then the retried copy is a duplicate, which the pipeline
        // ignores. The other way round (200 for spans Kafka never got) cannot happen.
        this.markFailing(`no acknowledgement within ${this.options.produceTimeoutMs} ms`);
        entry.settle(
          retryable(
            new UnavailableError(`Kafka did not acknowledge within ${this.options.produceTimeoutMs} ms`, {
              retryAfterMs: UNAVAILABLE_RETRY_MS,
            }),
          ),
        );
      }, this.options.produceTimeoutMs);
      entry.remaining = parts.length;
      entry.settle = (result: RetryableResult<void>) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        resolve(result);
      };
      for (const p of parts) {
        this.waiting.push(p);
        this.waitingSpans += p.spans;
        this.waitingBytes += p.bytes;
      }
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.inflight >= this.options.maxInflightSends || this.waiting.length === 0) return;
    if (
      this.waitingSpans >= this.options.maxBatchSpans ||
      this.waitingBytes >= this.maxSendBytes - BATCH_OVERHEAD_BYTES ||
      this.options.lingerMs === 0
    ) {
      this.sendNext();
      return;
    }
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.sendNext();
    }, this.options.lingerMs);
  }

  private sendNext(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const batch: Part[] = [];
    let spans = 0;
    let bytes = 0;
    const byteBudget = this.maxSendBytes - BATCH_OVERHEAD_BYTES;
    while (this.waiting.length > 0) {
      const next = this.waiting[0] as Part;
      if (batch.length > 0 && (spans + next.spans > this.options.maxBatchSpans || bytes + next.bytes > byteBudget)) break;
      this.waiting.shift();
      batch.push(next);
      spans += next.spans;
      bytes += next.bytes;
    }
    if (batch.length === 0) return;
    this.waitingSpans -= spans;
    this.waitingBytes -= bytes;
    this.inflight++;
    this.sending++;
    // A send still unanswered after produceTimeoutMs has had its requests answered 503: it gives its slot up, so
    // that once Kafka is back fresh sends go out instead of queueing behind sends stuck on dead connections.
    // Its spans and bytes stay pending until it ends, so the pending limits still bound what is held.
    let slotHeld = true;
    const releaseSlot = () => {
      if (!slotHeld) return;
      slotHeld = false;
      this.inflight--;
      this.schedule();
    };
    const slotTimer = setTimeout(releaseSlot, this.options.produceTimeoutMs);
    // Called when the send ends, before its publishers hear of it: a publish right after sees the room it made.
    let sent = false;
    const ended = () => {
      if (sent) return;
      sent = true;
      clearTimeout(slotTimer);
      this.sending--;
      this.pendingSpans -= spans;
      this.pendingBytes -= bytes;
      this.options.metrics.pendingSpans.set(this.pendingSpans);
    };
    void this.send(batch, spans, ended).finally(() => {
      ended();
      releaseSlot();
      if (this.sending === 0 && this.waiting.length === 0) for (const wake of this.idle.splice(0)) wake();
    });
    this.schedule();
  }

  private async send(batch: Part[], spans: number, ended: () => void): Promise<void> {
    const spanMessages: Message[] = [];
    const deadMessages: Message[] = [];
    for (const part of batch) {
      for (const m of part.messages) spanMessages.push(m);
      for (const d of part.deadLetters) deadMessages.push(d);
    }
    const topicMessages = [];
    if (spanMessages.length > 0) {
      const { topic } = this.options;
      topicMessages.push({ topic, messages: this.partitions ? mergeByPartition(topic, spanMessages, this.partitions) : spanMessages });
    }
    if (deadMessages.length > 0) topicMessages.push({ topic: this.options.deadLetterTopic, messages: deadMessages });
    const stopTimer = this.options.metrics.produceSeconds.startTimer();
    try {
      await this.producer.sendBatch({
        topicMessages,
        acks: -1,
        timeout: this.options.produceTimeoutMs,
        compression: CompressionTypes.None,
      });
      ended();
      stopTimer();
      this.markWorking();
      this.options.metrics.deadLetters.inc(deadMessages.length);
      for (const part of batch) if (--part.entry.remaining === 0) part.entry.settle(success(undefined));
    } catch (error) {
      ended();
      this.markFailing(`a send failed: ${(error as Error).message}`);
      this.options.metrics.produceRetries.inc();
      this.options.metrics.spansRefused.inc({ reason: 'kafka_unavailable' }, spans);
      this.options.log.warn({ err: (error as Error).message, spans }, 'Kafka send failed; senders will retry');
      const failure = retryable<void>(
        new UnavailableError('Kafka did not acknowledge the spans', { cause: error, retryAfterMs: UNAVAILABLE_RETRY_MS }),
      );
      for (const part of batch) part.entry.settle(failure);
    }
  }

  /** Resolves when nothing waits for Kafka. */
  flush(): Promise<void> {
    if (this.sending === 0 && this.waiting.length === 0) return Promise.resolve();
    this.sendNext();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  async shutdown(): Promise<void> {
    await this.flush();
    this.stopping = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    if (this.probeTimer) clearTimeout(this.probeTimer);
    if (this.partitionsTimer) clearTimeout(this.partitionsTimer);
    await this.producer.disconnect();
  }
}
