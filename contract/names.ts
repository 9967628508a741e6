/**
 * Span contract v1: every name holdscope and the engines agree on. Other folders import these constants
 * rather than spelling the strings, so a rename is one edit and a typo is a type error.
 */

export const CONTRACT_VERSION = 1;

/** Resource attributes of every engine process. */
export const ResourceAttr = {
  serviceName: 'service.name',
  role: 'pd.role',
  engineId: 'pd.engine.id',
  engineVersion: 'pd.engine.version',
  transferBackend: 'pd.transfer.backend',
  cluster: 'pd.cluster',
  kvCapacitySlots: 'pd.kv.capacity_slots',
  contractVersion: 'pd.contract.version',
  /**
   * Optional: the experiment arm (e.g. `baseline`, `fix`) and run (e.g. `run-3`) the engine belongs to, so that
   * `compare` can summarize each run and compare arms across runs. A lifecycle's arm and run are its decode engine's.
   */
  experimentArm: 'pd.experiment.arm',
  experimentRun: 'pd.experiment.run',
} as const;

export const Role = { router: 'router', prefill: 'prefill', decode: 'decode' } as const;
export type Role = (typeof Role)[keyof typeof Role];
export const ROLES: readonly Role[] = Object.values(Role);

/** A missing `pd.cluster` means this cluster. */
export const DEFAULT_CLUSTER = 'default';

export const SpanName = {
  admission: 'pd.admission',
  kvAlloc: 'pd.kv.alloc',
  transfer: 'pd.transfer',
  handoff: 'pd.handoff',
  hold: 'pd.hold',
  drain: 'pd.drain',
  ack: 'pd.ack',
  timeout: 'pd.timeout',
  release: 'pd.release',
  checksum: 'pd.checksum',
  cancel: 'pd.cancel',
} as const;
export type SpanName = (typeof SpanName)[keyof typeof SpanName];
export const SPAN_NAMES: readonly SpanName[] = Object.values(SpanName);

/** Spans whose name starts with this prefix are ours; anything else is "not ours", never an error. */
export const PD_PREFIX = 'pd.';

export const Attr = {
  requestId: 'pd.request.id',
  generation: 'pd.request.generation',
  contractVersion: 'pd.contract.version',
  admissionOutcome: 'pd.admission.outcome',
  admissionReason: 'pd.admission.reason',
  kvPages: 'pd.kv.pages',
  kvSlots: 'pd.kv.slots',
  rank: 'pd.rank',
  chunkIndex: 'pd.chunk.index',
  transferStatus: 'pd.transfer.status',
  transferBytes: 'pd.transfer.bytes',
  decodeEngineId: 'pd.decode.engine.id',
  holdExpectedRanks: 'pd.hold.expected_ranks',
  holdTimeoutMs: 'pd.hold.timeout_ms',
  drainChunksDropped: 'pd.drain.chunks_dropped',
  drainInflight: 'pd.drain.inflight',
  drainFailedSends: 'pd.drain.failed_sends',
  drainAckWithheld: 'pd.drain.ack_withheld',
  ackGeneration: 'pd.ack.generation',
  ackAccepted: 'pd.ack.accepted',
  timeoutMissingRanks: 'pd.timeout.missing_ranks',
  timeoutAction: 'pd.timeout.action',
  releaseReason: 'pd.release.reason',
  checksumOutcome: 'pd.checksum.outcome',
  cancelTargets: 'pd.cancel.targets',
} as const;

export const AdmissionOutcome = { accepted: 'accepted', rejected: 'rejected' } as const;
export type AdmissionOutcome = (typeof AdmissionOutcome)[keyof typeof AdmissionOutcome];

export const TransferStatus = { ok: 'ok', failed: 'failed', timeout: 'timeout' } as const;
export type TransferStatus = (typeof TransferStatus)[keyof typeof TransferStatus];

export const TimeoutAction = { release: 'release', quarantine: 'quarantine' } as const;
export type TimeoutAction = (typeof TimeoutAction)[keyof typeof TimeoutAction];

/**
 * Why decode returned a generation's slots to the pool. `drained` and `timeout` end a hold; `forced` is a
 * release without waiting on a hold (an abort after handoff, an operator); `finished` is the normal end of
 * a request that completed decoding. The last two are not in the original brief's table: without them the
 * ownership of a page after a normal request ends is unknown, and late-write victims cannot be named.
 */
export const ReleaseReason = { drained: 'drained', timeout: 'timeout', forced: 'forced', finished: 'finished' } as const;
export type ReleaseReason = (typeof ReleaseReason)[keyof typeof ReleaseReason];

export const ChecksumOutcome = { ok: 'ok', mismatch: 'mismatch' } as const;
export type ChecksumOutcome = (typeof ChecksumOutcome)[keyof typeof ChecksumOutcome];

/** A lifecycle's resolution, derived from its hold and release. */
export const Resolution = { drained: 'drained', timeout: 'timeout', open: 'open', none: 'none' } as const;
export type Resolution = (typeof Resolution)[keyof typeof Resolution];

/** Which role may emit each span. */
export const EMITTED_BY: Readonly<Record<SpanName, readonly Role[]>> = {
  'pd.admission': ['router', 'decode'],
  'pd.kv.alloc': ['decode'],
  'pd.transfer': ['prefill'],
  'pd.handoff': ['decode'],
  'pd.hold': ['decode'],
  'pd.drain': ['prefill'],
  'pd.ack': ['decode'],
  'pd.timeout': ['decode'],
  'pd.release': ['decode'],
  'pd.checksum': ['decode'],
  'pd.cancel': ['router'],
};
