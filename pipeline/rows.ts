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

/** The columns a span fills beyond the common ones, as `spans` names them. */
export interface OwnColumns {
  rank: number;
  chunk_index: number;
  pages: number[];
  slots: number;
  admission_outcome: string;
  admission_reason: string;
  transfer_status: string;
  transfer_bytes: number;
  decode_engine_id: string;
  expected_ranks: number[];
  hold_timeout_ms: number;
  chunks_dropped: number;
  inflight: number;
  failed_sends: number;
  ack_withheld: number;
  ack_generation: number;
  ack_accepted: number;
  missing_ranks: number[];
  timeout_action: string;
  release_reason: string;
  checksum_outcome: string;
  cancel_targets: string[];
}

/** The table's DEFAULTs: rank and chunk_index -1, everything else empty. */
export const NO_OWN_COLUMNS: Readonly<OwnColumns> = {
  rank: -1,
  chunk_index: -1,
  pages: [],
  slots: 0,
  admission_outcome: '',
  admission_reason: '',
  transfer_status: '',
  transfer_bytes: 0,
  decode_engine_id: '',
  expected_ranks: [],
  hold_timeout_ms: 0,
  chunks_dropped: 0,
  inflight: 0,
  failed_sends: 0,
  ack_withheld: 0,
  ack_generation: 0,
  ack_accepted: 0,
  missing_ranks: [],
  timeout_action: '',
  release_reason: '',
  checksum_outcome: '',
  cancel_targets: [],
};

/**
 * The span's own columns written into `own` over the table's DEFAULTs: the one statement of which span carries which
 * column, for the row objects here and the Native blocks (pipeline/native.ts), which refill one object for every span.
 */
export function fillOwnColumns(e: PdEvent, own: OwnColumns): OwnColumns {
  Object.assign(own, NO_OWN_COLUMNS);
  switch (e.name) {
    case 'pd.admission':
      own.admission_outcome = e.outcome;
      own.admission_reason = e.reason;
      break;
    case 'pd.kv.alloc':
      own.pages = e.pages;
      own.slots = e.slots;
      break;
    case 'pd.transfer':
      own.rank = e.rank;
      own.chunk_index = e.chunkIndex;
      own.pages = e.pages;
      own.transfer_status = e.status;
      own.transfer_bytes = e.bytes;
      own.decode_engine_id = e.decodeEngineId;
      break;
    case 'pd.handoff':
      break;
    case 'pd.hold':
      own.expected_ranks = e.expectedRanks;
      own.hold_timeout_ms = e.timeoutMs;
      own.slots = e.slots;
      own.pages = e.pages;
      break;
    case 'pd.drain':
      own.rank = e.rank;
      own.chunks_dropped = e.chunksDropped;
      own.inflight = e.inflight;
      own.failed_sends = e.failedSends;
      own.ack_withheld = e.ackWithheld ? 1 : 0;
      own.decode_engine_id = e.decodeEngineId;
      break;
    case 'pd.ack':
      own.rank = e.rank;
      own.ack_generation = e.ackGeneration;
      own.ack_accepted = e.accepted ? 1 : 0;
      break;
    case 'pd.timeout':
      own.missing_ranks = e.missingRanks;
      own.timeout_action = e.action;
      break;
    case 'pd.release':
      own.release_reason = e.reason;
      own.pages = e.pages;
      break;
    case 'pd.checksum':
      own.checksum_outcome = e.outcome;
      break;
    case 'pd.cancel':
      own.cancel_targets = e.targets;
      break;
  }
  return own;
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
    ...fillOwnColumns(e, { ...NO_OWN_COLUMNS }),
  };
}
