import type { SimConfig } from './config.ts';
import type { Lifecycle } from './state.ts';
import { LifecycleFlag, type LifecycleTruth } from './truth.ts';

const ms = (us: number | null): number | null => (us === null ? null : us / 1000);

/** What really happened to one generation, from the model's state after the run. */
export function lifecycleTruth(lc: Lifecycle, config: SimConfig): LifecycleTruth {
  const held = lc.holdStartUs !== null;
  const released = lc.releaseUs !== null;
  const resolution = !held ? 'none' : !released ? 'open' : lc.releaseReason === 'drained' ? 'drained' : 'timeout';
  const flags = new Set(lc.flags);
  if (resolution === 'open') flags.add(LifecycleFlag.openHold);
  return {
    cluster: config.cluster,
    request_id: lc.req.requestId,
    generation: lc.req.generation,
    prefill_engine: lc.prefill.id,
    decode_engine: lc.decode.spec.id,
    backend: lc.decode.spec.backend,
    admission: lc.admission,
    aborted: lc.aborted,
    allocated: lc.allocated,
    handoff: lc.handoffUs !== null,
    chunks: lc.chunkCount,
    transfers: { ...lc.transfers },
    resolution,
    hold_start_ms: ms(lc.holdStartUs),
    expected_ranks: [...lc.expectedRanks],
    acked_ranks: [...lc.ackedRanks].sort((a, b) => a - b),
    stale_acks: { accepted: lc.staleAccepted, rejected: lc.staleRejected },
    timeout_ms: ms(lc.timeoutUs),
    missing_ranks: [...lc.missingRanks],
    release_ms: ms(lc.releaseUs),
    release_reason: lc.releaseReason,
    hold_ms: held && released ? ((lc.releaseUs as number) - (lc.holdStartUs as number)) / 1000 : null,
    transfer_tail_ms: held && lc.lastOkWriteUs !== null ? (lc.lastOkWriteUs - (lc.holdStartUs as number)) / 1000 : null,
    late_writes: lc.lateWrites.map((w) => ({ ...w, pages: [...w.pages], victims: w.victims.map((v) => ({ ...v, pages: [...v.pages] })) })),
    flags: [...flags].sort(),
  };
}
