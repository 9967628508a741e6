import { InputError, type Logger } from '../common/index.ts';
import { eventsOf } from './decode.ts';
import type { PipelineMetrics } from './metrics.ts';
import { encodeSpanLine, type EncodedRows } from './encode.ts';
import { LifecycleKeySet } from './records.ts';
import { spanRow } from './rows.ts';

/** Message values to span rows ready to insert, counting what is skipped and why. Undecodable messages never block a partition. */
export function rowsOf(values: Iterable<Buffer | null>, metrics: PipelineMetrics, log: Logger): EncodedRows {
  let text = '';
  let rows = 0;
  const keys = new LifecycleKeySet();
  for (const value of values) {
    metrics.messages.inc();
    if (!value || value.length === 0) {
      metrics.undecodable.inc();
      continue;
    }
    try {
      const decoded = eventsOf(value);
      for (const event of decoded.events) {
        const row = spanRow(event);
        text += encodeSpanLine(row);
        keys.add(row.cluster, row.request_id, row.generation);
      }
      rows += decoded.events.length;
      if (decoded.notOurs > 0) metrics.notOurs.inc(decoded.notOurs);
      for (const bad of decoded.invalid) metrics.invalidSpans.inc({ field: bad.field });
    } catch (error) {
      if (!(error instanceof InputError)) throw error;
      metrics.undecodable.inc();
      log.warn({ err: error.message }, 'skipping a message that is not an OTLP trace request');
    }
  }
  return { text, rows, keys: keys.values() };
}
