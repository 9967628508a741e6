import type { Resolution } from '../../contract/index.ts';

/** The per-lifecycle flags the detections must raise, named as the flag kinds of the read API. */
export const LifecycleFlag = {
  lateWrite: 'late_write',
  unsafeRelease: 'unsafe_release',
  ackAfterFailedSend: 'ack_after_failed_send',
  staleAckConsumed: 'stale_ack_consumed',
  admissionLeak: 'admission_leak',
  checksumMismatch: 'checksum_mismatch',
  openHold: 'open_hold',
} as const;
export type LifecycleFlag = (typeof LifecycleFlag)[keyof typeof LifecycleFlag];

export interface LateWriteVictim {
  request_id: string;
  generation: number;
  pages: number[];
}

export interface LateWriteTruth {
  rank: number;
  chunk_index: number;
  /** Milliseconds since the simulation's start. */
  completed_ms: number;
  pages: number[];
  victims: LateWriteVictim[];
}

/**
 * One line of the truth file: what really happened to one request generation. Times are milliseconds
 * since the simulation's start (the start time itself is not in the file, so a seed gives the same bytes
 * whenever it runs); durations are differences of span timestamps, exactly as a reader of the spans sees them.
 */
export interface LifecycleTruth {
  cluster: string;
  request_id: string;
  generation: number;
  prefill_engine: string;
  decode_engine: string;
  backend: string;
  admission: 'accepted' | 'rejected';
  aborted: boolean;
  allocated: boolean;
  handoff: boolean;
  chunks: number;
  transfers: { ok: number; failed: number; timeout: number };
  resolution: Resolution;
  hold_start_ms: number | null;
  expected_ranks: number[];
  acked_ranks: number[];
  stale_acks: { accepted: number; rejected: number };
  timeout_ms: number | null;
  missing_ranks: number[];
  release_ms: number | null;
  release_reason: string | null;
  hold_ms: number | null;
  transfer_tail_ms: number | null;
  late_writes: LateWriteTruth[];
  flags: LifecycleFlag[];
}

/** Serializes truth lines in key order, one JSON object per line. */
export function formatTruth(lines: LifecycleTruth[]): string {
  const sorted = [...lines].sort((a, b) =>
    a.request_id < b.request_id ? -1 : a.request_id > b.request_id ? 1 : a.generation - b.generation,
  );
  return sorted.map((line) => JSON.stringify(line)).join('\n') + (sorted.length > 0 ? '\n' : '');
}
