import { InputError, type Logger } from '../common/index.ts';
import { eventsOf } from './decode.ts';
import type { PipelineMetrics } from './metrics.ts';
import { EncodedRowsBuilder, type EncodedRows } from './encode.ts';
import { spanRow } from './rows.ts';

/** Message values to span rows ready to insert, counting what is skipped and why. Undecodable messages never block a partition. */
export function rowsOf(values: Iterable<Buffer | null>, metrics: PipelineMetrics, log: Logger): EncodedRows {
  const rows = new EncodedRowsBuilder();
  for (const value of values) {
    metrics.messages.inc();
    if (!value || value.length === 0) {
      metrics.undecodable.inc();
      continue;
    }
    try {
      const decoded = eventsOf(value);
      for (const event of decoded.events) rows.add(spanRow(event));
      if (decoded.notOurs > 0) metrics.notOurs.inc(decoded.notOurs);
      for (const bad of decoded.invalid) metrics.invalidSpans.inc({ field: bad.field });
    } catch (error) {
      if (!(error instanceof InputError)) throw error;
      metrics.undecodable.inc();
      log.warn({ err: error.message }, 'skipping a message that is not an OTLP trace request');
    }
  }
  return rows.build();
}
