import type { PdEvent } from '../contract/index.ts';

/** One row of the `spans` table. Times are strings: chdb rejects DateTime64 given as fractional JSON numbers. */
export interface SpanRow {
  cluster: string;
  request_id: string;
  generation: number;
  name: string;
  trace_id: string;
  span_id: string;
  start_time: string;
  end_time: string;
  engine_id: string;
  engine_role: string;
  engine_version: string;
  backend: string;
  capacity_slots: number;
  [column: string]: string | number | number[] | string[];
}

let cachedSecond = -1n;
let cachedPrefix = '';

/** Unix nanoseconds to ClickHouse's `YYYY-MM-DD hh:mm:ss.nnnnnnnnn` (UTC), exactly. */
export function formatNanos(ns: bigint): string {
  const second = ns / 1_000_000_000n;
  if (second !== cachedSecond) {
    cachedSecond = second;
    cachedPrefix = new Date(Number(second) * 1000).toISOString().slice(0, 19).replace('T', ' ');
  }
  return `${cachedPrefix}.${(ns % 1_000_000_000n).toString().padStart(9, '0')}`;
}

/** The columns a span fills beyond the common ones; the table's defaults cover the rest. */
function ownColumns(e: PdEvent): Record<string, string | number | number[] | string[]> {
  switch (e.name) {
    case 'pd.admission':
      return { admission_outcome: e.outcome, admission_reason: e.reason };
    case 'pd.kv.alloc':
      return { pages: e.pages, slots: e.slots };
    case 'pd.transfer':
      return {
        rank: e.rank,
        chunk_index: e.chunkIndex,
        pages: e.pages,
        transfer_status: e.status,
        transfer_bytes: e.bytes,
        decode_engine_id: e.decodeEngineId,
      };
    case 'pd.handoff':
      return {};
    case 'pd.hold':
      return { expected_ranks: e.expectedRanks, hold_timeout_ms: e.timeoutMs, slots: e.slots, pages: e.pages };
    case 'pd.drain':
      return {
        rank: e.rank,
        chunks_dropped: e.chunksDropped,
        inflight: e.inflight,
        failed_sends: e.failedSends,
        ack_withheld: e.ackWithheld ? 1 : 0,
        decode_engine_id: e.decodeEngineId,
      };
    case 'pd.ack':
      return { rank: e.rank, ack_generation: e.ackGeneration, ack_accepted: e.accepted ? 1 : 0 };
    case 'pd.timeout':
      return { missing_ranks: e.missingRanks, timeout_action: e.action };
    case 'pd.release':
      return { release_reason: e.reason, pages: e.pages };
    case 'pd.checksum':
      return { checksum_outcome: e.outcome };
    case 'pd.cancel':
      return { cancel_targets: e.targets };
  }
}

export function spanRow(e: PdEvent): SpanRow {
  return {
    cluster: e.cluster,
    request_id: e.requestId,
    generation: e.generation,
    name: e.name,
    trace_id: e.traceId,
    span_id: e.spanId,
    start_time: formatNanos(e.startNs),
    end_time: formatNanos(e.endNs),
    engine_id: e.engine.id,
    engine_role: e.engine.role,
    engine_version: e.engine.version,
    backend: e.engine.backend,
    capacity_slots: e.engine.capacitySlots,
    experiment_arm: e.engine.experimentArm,
    experiment_run: e.engine.experimentRun,
    ...ownColumns(e),
  };
}
