import { CompressionTypes, Partitioners, type Kafka, type Message, type Producer } from 'kafkajs';
import { OverloadedError, retryable, success, UnavailableError, type Logger, type RetryableResult } from '../common/index.ts';
import type { CollectorMetrics } from './metrics.ts';
import { MESSAGE_HEADERS, type DeadLetter, type SpanMessage } from './messages.ts';

/**
 * Where accepted spans go. `publish` resolves once the messages are durable (success), or says when to try
 * again (retryable): it never resolves success for a message the queue does not hold.
 */
export interface SpanQueue {
  start(): Promise<void>;
  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>>;
  /** True while the queue can take spans (connected, last send succeeded). */
  healthy(): boolean;
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

export interface KafkaSpanQueueOptions {
  kafka: Kafka;
  topic: string;
  deadLetterTopic: string;
  maxPendingSpans: number;
  maxBatchSpans: number;
  lingerMs: number;
  maxInflightSends: number;
  produceTimeoutMs: number;
  metrics: CollectorMetrics;
  log: Logger;
}

interface Entry {
  messages: SpanMessage[];
  deadLetters: DeadLetter[];
  spans: number;
  settle: (result: RetryableResult<void>) => void;
}

const OVERLOADED_RETRY_MS = 1000;
const UNAVAILABLE_RETRY_MS = 2000;
const RECONNECT_MS = 2000;

/**
 * Batches publishes from concurrent requests into few Kafka sends (acks from all in-sync replicas), with a
 * bound on spans waiting for Kafka: past it, callers are told to retry (429) instead of being queued.
 */
export class KafkaSpanQueue implements SpanQueue {
  private readonly producer: Producer;
  private readonly waiting: Entry[] = [];
  private pendingSpans = 0;
  private inflight = 0;
  private timer: NodeJS.Timeout | undefined;
  private connected = false;
  private lastSendOk = true;
  private stopping = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly idle: (() => void)[] = [];

  constructor(private readonly options: KafkaSpanQueueOptions) {
    this.producer = options.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: true,
      // A failed send is answered 503 and retried by the sender; kafkajs's own retries only smooth blips.
      retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    this.producer.on(this.producer.events.DISCONNECT, () => {
      this.connected = false;
      this.scheduleReconnect();
    });
  }

  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopping) return;
    try {
      await this.producer.connect();
      this.connected = true;
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

  healthy(): boolean {
    return this.connected && this.lastSendOk;
  }

  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    const spans = messages.reduce((n, m) => n + m.spans, 0) + deadLetters.length;
    if (messages.length === 0 && deadLetters.length === 0) return Promise.resolve(success(undefined));
    if (this.stopping || !this.connected) {
      this.options.metrics.spansRefused.inc({ reason: 'kafka_unavailable' }, spans);
      return Promise.resolve(retryable(UNAVAILABLE_RETRY_MS, new UnavailableError('Kafka is unreachable', { retryAfterMs: UNAVAILABLE_RETRY_MS })));
    }
    if (this.pendingSpans + spans > this.options.maxPendingSpans) {
      this.options.metrics.spansRefused.inc({ reason: 'overloaded' }, spans);
      return Promise.resolve(
        retryable(OVERLOADED_RETRY_MS, new OverloadedError(`collector overloaded: ${this.pendingSpans} spans waiting for Kafka`, { retryAfterMs: OVERLOADED_RETRY_MS })),
      );
    }
    this.pendingSpans += spans;
    this.options.metrics.pendingSpans.set(this.pendingSpans);
    return new Promise((resolve) => {
      let settled = false;
      const deadline = setTimeout(() => {
        // Kafka may still take the batch later: then the retried copy is a duplicate, which the pipeline
        // ignores. The other way round (200 for spans Kafka never got) cannot happen.
        settle(retryable(UNAVAILABLE_RETRY_MS, new UnavailableError(`Kafka did not acknowledge within ${this.options.produceTimeoutMs} ms`)));
      }, this.options.produceTimeoutMs);
      const settle = (result: RetryableResult<void>) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        resolve(result);
      };
      this.waiting.push({ messages, deadLetters, spans, settle });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.inflight >= this.options.maxInflightSends || this.waiting.length === 0) return;
    const queued = this.waiting.reduce((n, e) => n + e.spans, 0);
    if (queued >= this.options.maxBatchSpans || this.options.lingerMs === 0) {
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
    const batch: Entry[] = [];
    let spans = 0;
    while (this.waiting.length > 0 && (batch.length === 0 || spans + (this.waiting[0] as Entry).spans <= this.options.maxBatchSpans)) {
      const entry = this.waiting.shift() as Entry;
      batch.push(entry);
      spans += entry.spans;
    }
    if (batch.length === 0) return;
    this.inflight++;
    void this.send(batch, spans).finally(() => {
      this.inflight--;
      this.pendingSpans -= spans;
      this.options.metrics.pendingSpans.set(this.pendingSpans);
      this.schedule();
      if (this.inflight === 0 && this.waiting.length === 0) for (const wake of this.idle.splice(0)) wake();
    });
    this.schedule();
  }

  private async send(batch: Entry[], spans: number): Promise<void> {
    const headers = MESSAGE_HEADERS;
    const spanMessages: Message[] = [];
    const deadMessages: Message[] = [];
    for (const entry of batch) {
      for (const m of entry.messages) spanMessages.push({ key: m.key, value: m.value, headers });
      for (const d of entry.deadLetters) deadMessages.push({ key: d.key, value: d.value, headers: { 'content-type': 'application/json' } });
    }
    const topicMessages = [];
    if (spanMessages.length > 0) topicMessages.push({ topic: this.options.topic, messages: spanMessages });
    if (deadMessages.length > 0) topicMessages.push({ topic: this.options.deadLetterTopic, messages: deadMessages });
    const stopTimer = this.options.metrics.produceSeconds.startTimer();
    try {
      await this.producer.sendBatch({ topicMessages, acks: -1, timeout: this.options.produceTimeoutMs, compression: CompressionTypes.None });
      stopTimer();
      this.lastSendOk = true;
      this.options.metrics.kafkaUp.set(1);
      this.options.metrics.spansAccepted.inc(spans - deadMessages.length);
      this.options.metrics.deadLetters.inc(deadMessages.length);
      for (const entry of batch) entry.settle(success(undefined));
    } catch (error) {
      this.lastSendOk = false;
      this.options.metrics.kafkaUp.set(0);
      this.options.metrics.produceRetries.inc();
      this.options.metrics.spansRefused.inc({ reason: 'kafka_unavailable' }, spans);
      this.options.log.warn({ err: (error as Error).message, spans }, 'Kafka send failed; senders will retry');
      const failure = retryable<void>(UNAVAILABLE_RETRY_MS, new UnavailableError('Kafka did not acknowledge the spans', { cause: error, retryAfterMs: UNAVAILABLE_RETRY_MS }));
      for (const entry of batch) entry.settle(failure);
    }
  }

  /** Resolves when nothing waits for Kafka. */
  flush(): Promise<void> {
    if (this.inflight === 0 && this.waiting.length === 0) return Promise.resolve();
    this.sendNext();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  async shutdown(): Promise<void> {
    await this.flush();
    this.stopping = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.producer.disconnect();
  }
}

