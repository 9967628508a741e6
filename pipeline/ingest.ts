import type { MessageHeaders, PdEvent, SpanTimeWindow } from '../contract/index.ts';
import { InputError, type Logger } from '../common/index.ts';
import { eventsOf } from './decode.ts';
import type { PipelineMetrics } from './metrics.ts';
import { NativeRowsBuilder } from './native.ts';
import { TsvRowsBuilder, type EncodedRows, type RowEncoding } from './encode.ts';
import { spanRow } from './rows.ts';

/** A message read from Kafka (or handed over in process): its value, and its headers, which may declare the encoding. */
export interface SpanMessageIn {
  value: Buffer | null;
  headers?: MessageHeaders;
}

function rowsBuilder(encoding: RowEncoding): { add(e: PdEvent): void; build(): EncodedRows } {
  if (encoding === 'Native') return new NativeRowsBuilder();
  const text = new TsvRowsBuilder();
  return { add: (e) => text.add(spanRow(e)), build: () => text.build() };
}

/**
 * Messages to span rows ready to insert, in `encoding`, counting what is skipped and why. Undecodable messages never
 * block a partition. With a `window`, spans outside it (clock skew, retention) are skipped as invalid.
 */
export function rowsOf<E extends RowEncoding>(
  messages: Iterable<SpanMessageIn>,
  encoding: E,
  metrics: PipelineMetrics,
  log: Logger,
  window?: SpanTimeWindow,
): Extract<EncodedRows, { format: E }> {
  const rows = rowsBuilder(encoding);
  for (const { value, headers } of messages) {
    metrics.messages.inc();
    if (!value || value.length === 0) {
      metrics.undecodable.inc();
      continue;
    }
    try {
      const decoded = eventsOf(value, headers, window);
      for (const event of decoded.events) rows.add(event);
      if (decoded.notOurs > 0) metrics.notOurs.inc(decoded.notOurs);
      for (const bad of decoded.invalid) metrics.invalidSpans.inc({ field: bad.field });
    } catch (error) {
      if (!(error instanceof InputError)) throw error;
      metrics.undecodable.inc();
      log.warn({ err: error.message }, 'skipping a message that is not an OTLP trace request');
    }
  }
  return rows.build() as Extract<EncodedRows, { format: E }>;
}
