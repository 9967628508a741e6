import type { DeadLetter, SpanMessage, SpanQueue } from '../contract/index.ts';
import { MESSAGE_HEADERS } from '../contract/index.ts';
import { OverloadedError, retryable, success, UnavailableError, type Logger, type RetryableResult } from '../common/index.ts';
import { rowsOf } from './ingest.ts';
import type { PipelineMetrics } from './metrics.ts';
import type { SpanWriter } from './writer.ts';

const OVERLOADED_RETRY_MS = 1000;

/**
 * Stands in for Kafka when no broker is configured (`holdscope start` on one machine): the collector's
 * publishes go straight to the ClickHouse writer, with the same bound and batching. A publish succeeds only
 * once ClickHouse has the rows, so a 200 still means stored; what is lost is Kafka's buffer: while
 * ClickHouse is down, senders are told to retry instead of their spans waiting in a topic, and dead letters
 * are counted and logged rather than kept. Rows ClickHouse refuses for their content go to `span_dead_letters`
 * as they do behind Kafka, and their request is answered 200 like the rest: sending them again would not help.
 */
export class InProcessQueue implements SpanQueue {
  private pending = 0;

  constructor(
    private readonly writer: SpanWriter,
    private readonly options: { maxPendingSpans: number; timeoutMs: number; metrics: PipelineMetrics; log: Logger },
  ) {}

  async start(): Promise<void> {}

  healthy(): boolean {
    return this.pending < this.options.maxPendingSpans;
  }

  async publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>> {
    for (const letter of deadLetters) this.options.log.warn({ deadLetter: letter.value.toString('utf8').slice(0, 2000) }, 'rejected span');
    const spans = messages.reduce((n, m) => n + m.spans, 0);
    if (spans === 0) return success(undefined);
    if (this.pending + spans > this.options.maxPendingSpans) {
      return retryable(new OverloadedError(`${this.pending} spans waiting for ClickHouse`, { retryAfterMs: OVERLOADED_RETRY_MS }));
    }
    this.pending += spans;
    const written = this.writer
      .write(
        rowsOf(
          messages.map((m) => ({ value: m.value, headers: MESSAGE_HEADERS })),
          this.writer.rowEncoding,
          this.options.metrics,
          this.options.log,
        ),
      )
      .finally(() => {
        this.pending -= spans;
      });
    let timer: NodeJS.Timeout | undefined;
    // A sender waits at most timeoutMs; rows still land later, and its retry is then a harmless duplicate.
    const late = new Promise<RetryableResult<void>>((resolve) => {
      timer = setTimeout(
        () =>
          resolve(
            retryable(
              new UnavailableError(`ClickHouse did not acknowledge within ${this.options.timeoutMs} ms`, {
                retryAfterMs: OVERLOADED_RETRY_MS * 2,
              }),
            ),
          ),
        this.options.timeoutMs,
      );
    });
    try {
      // The writer refuses rows only once it stops (rows ClickHouse refuses for their content are dead-lettered and
      // resolve): the sender retries, against this process's successor.
      const stored = written.then(
        () => success<void>(undefined),
        () => retryable<void>(new UnavailableError('holdscope is stopping: spans not stored', { retryAfterMs: OVERLOADED_RETRY_MS })),
      );
      return await Promise.race([stored, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  flush(): Promise<void> {
    return this.writer.flush();
  }

  /** Stops the writer (the collector calls this once it takes no more requests): retries end, unstored rows are refused. */
  shutdown(): Promise<void> {
    return this.writer.shutdown();
  }
}
