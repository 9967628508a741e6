// The simulator's state of one request generation and one decode engine: what the model (model.ts) mutates and the
// truth builder (truth-builder.ts) reads, apart from both so that neither imports the other's internals.
import type { ReleaseReason } from '../../contract/index.ts';
import type { RequestRef } from '../instrument.ts';
import type { DecodeEngineSpec, PrefillEngineSpec } from './config.ts';
import type { MinHeap } from './heap.ts';
import type { LateWriteTruth, LifecycleFlag } from './truth.ts';

export interface RankState {
  rank: number;
  /** Chunks computed by prefill and ready to post. */
  ready: number;
  /** Next chunk index this rank posts. */
  next: number;
  inflight: number;
  status: Uint8Array;
  stopped: boolean;
  draining: boolean;
  drainStartUs: number;
  /** Launched, uncompleted writes when ABORT arrived: what the drain waits for. */
  inflightAtAbort: number;
  drained: boolean;
}

export interface Lifecycle {
  req: RequestRef;
  prefill: PrefillEngineSpec;
  decode: DecodeState;
  arrivalUs: number;
  pagesNeeded: number;
  chunkCount: number;
  admission: 'accepted' | 'rejected';
  leaked: boolean;
  aborted: boolean;
  queued: boolean;
  allocated: boolean;
  pages: number[];
  ranks: RankState[];
  handoffUs: number | null;
  corrupted: boolean;
  holdStartUs: number | null;
  expectedRanks: number[];
  ackedRanks: Set<number>;
  staleAccepted: number;
  staleRejected: number;
  timeoutUs: number | null;
  missingRanks: number[];
  releaseUs: number | null;
  releaseReason: ReleaseReason | null;
  lastOkWriteUs: number | null;
  transfers: { ok: number; failed: number; timeout: number };
  lateWrites: LateWriteTruth[];
  flags: Set<LifecycleFlag>;
  /** Closed: finished, released without a hold, or dropped before allocation. */
  closed: boolean;
}

export interface DecodeState {
  spec: DecodeEngineSpec;
  free: MinHeap<number>;
  owner: (Lifecycle | null)[];
  waiting: Lifecycle[];
}
