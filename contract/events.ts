import type { AdmissionOutcome, ChecksumOutcome, ReleaseReason, Role, SpanName, TimeoutAction, TransferStatus } from './names.ts';

/** The engine that emitted a span, from its resource attributes. */
export interface EngineRef {
  role: Role;
  id: string;
  version: string;
  /** Empty for routers, which transfer nothing. */
  backend: string;
  /** Decode engines only; 0 elsewhere. */
  capacitySlots: number;
  /** `pd.experiment.arm` and `pd.experiment.run`; '' when the engine is in no experiment. */
  experimentArm: string;
  experimentRun: string;
}

/** (cluster, request id, generation): the key every span of one request incarnation shares. */
export interface LifecycleKey {
  cluster: string;
  requestId: string;
  generation: number;
}

interface EventBase extends LifecycleKey {
  contractVersion: number;
  engine: EngineRef;
  traceId: string;
  spanId: string;
  /** Unix time in nanoseconds. Instants have end equal to start. */
  startNs: bigint;
  endNs: bigint;
}

export interface AdmissionEvent extends EventBase {
  name: 'pd.admission';
  outcome: AdmissionOutcome;
  reason: string;
}
export interface KvAllocEvent extends EventBase {
  name: 'pd.kv.alloc';
  pages: number[];
  slots: number;
}
export interface TransferEvent extends EventBase {
  name: 'pd.transfer';
  rank: number;
  chunkIndex: number;
  pages: number[];
  status: TransferStatus;
  bytes: number;
  decodeEngineId: string;
}
export interface HandoffEvent extends EventBase {
  name: 'pd.handoff';
}
export interface HoldEvent extends EventBase {
  name: 'pd.hold';
  expectedRanks: number[];
  timeoutMs: number;
  slots: number;
  pages: number[];
}
export interface DrainEvent extends EventBase {
  name: 'pd.drain';
  rank: number;
  chunksDropped: number;
  inflight: number;
  failedSends: number;
  ackWithheld: boolean;
  decodeEngineId: string;
}
export interface AckEvent extends EventBase {
  name: 'pd.ack';
  rank: number;
  ackGeneration: number;
  accepted: boolean;
}
export interface TimeoutEvent extends EventBase {
  name: 'pd.timeout';
  missingRanks: number[];
  action: TimeoutAction;
}
export interface ReleaseEvent extends EventBase {
  name: 'pd.release';
  reason: ReleaseReason;
  pages: number[];
}
export interface ChecksumEvent extends EventBase {
  name: 'pd.checksum';
  outcome: ChecksumOutcome;
}
export interface CancelEvent extends EventBase {
  name: 'pd.cancel';
  targets: string[];
}

/** One contract span, validated and typed. */
export type PdEvent =
  | AdmissionEvent
  | KvAllocEvent
  | TransferEvent
  | HandoffEvent
  | HoldEvent
  | DrainEvent
  | AckEvent
  | TimeoutEvent
  | ReleaseEvent
  | ChecksumEvent
  | CancelEvent;

export type PdEventOf<N extends SpanName> = Extract<PdEvent, { name: N }>;

/** The validator's answer for one span. */
export type ValidationResult =
  { status: 'valid'; event: PdEvent } | { status: 'not_ours' } | { status: 'invalid'; spanName: string; field: string; reason: string };
