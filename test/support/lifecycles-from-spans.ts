import { lifecycleKeyId, type PdEvent, type PdEventOf, type SpanName } from '../../contract/index.ts';
import type { LifecycleTruth } from '../../emitter/index.ts';

/**
 * An independent reading of exported spans into the truth's terms, written from the contract alone. Tests
 * compare it with the simulator's own truth: if both agree lifecycle by lifecycle, the spans carry the truth.
 */
export type DerivedLifecycle = Pick<
  LifecycleTruth,
  | 'request_id'
  | 'generation'
  | 'resolution'
  | 'hold_ms'
  | 'transfer_tail_ms'
  | 'release_reason'
  | 'acked_ranks'
  | 'missing_ranks'
  | 'stale_acks'
  | 'admission'
  | 'late_writes'
  | 'flags'
>;

type Group = { [N in SpanName]?: PdEventOf<N>[] };

const keyOf = (e: { cluster: string; requestId: string; generation: number }) => lifecycleKeyId(e.cluster, e.requestId, e.generation);
const msBetween = (later: bigint, earlier: bigint) => Number(later - earlier) / 1e6;

export function deriveLifecycles(events: PdEvent[], startNs: bigint): Map<string, DerivedLifecycle> {
  const groups = new Map<string, Group>();
  for (const e of events) {
    const g = groups.get(keyOf(e)) ?? {};
    ((g[e.name] ??= []) as PdEvent[]).push(e);
    groups.set(keyOf(e), g);
  }
  // Page ownership intervals per decode engine, for the as-of join that names victims.
  const allocs = events.filter((e): e is PdEventOf<'pd.kv.alloc'> => e.name === 'pd.kv.alloc');
  const releaseOf = (k: string) => groups.get(k)?.['pd.release']?.[0]?.startNs;

  function ownerAt(decodeEngine: string, page: number, at: bigint): PdEventOf<'pd.kv.alloc'> | undefined {
    let best: PdEventOf<'pd.kv.alloc'> | undefined;
    for (const a of allocs) {
      if (a.engine.id !== decodeEngine || a.startNs > at || !a.pages.includes(page)) continue;
      if (!best || a.startNs > best.startNs) best = a;
    }
    if (!best) return undefined;
    const released = releaseOf(keyOf(best));
    return released !== undefined && released <= at ? undefined : best;
  }

  const out = new Map<string, DerivedLifecycle>();
  for (const [key, g] of groups) {
    const any = Object.values(g)[0]?.[0] as PdEvent;
    const hold = g['pd.hold']?.[0];
    const release = g['pd.release']?.[0];
    const transfers = g['pd.transfer'] ?? [];
    const acks = g['pd.ack'] ?? [];
    const okEnds = transfers.filter((t) => t.status === 'ok').map((t) => t.endNs);
    const lastOk = okEnds.length > 0 ? okEnds.reduce((a, b) => (a > b ? a : b)) : undefined;
    const resolution = !hold ? 'none' : !release ? 'open' : release.reason === 'drained' ? 'drained' : 'timeout';
    const late = release
      ? transfers
          .filter((t) => t.status === 'ok' && t.endNs > release.startNs)
          .sort((a, b) => (a.endNs < b.endNs ? -1 : a.endNs > b.endNs ? 1 : 0))
      : [];
    const lateWrites = late.map((t) => {
      const victims = new Map<string, { request_id: string; generation: number; pages: number[] }>();
      for (const page of t.pages) {
        const owner = ownerAt(t.decodeEngineId, page, t.endNs);
        if (!owner || keyOf(owner) === key) continue;
        const v = victims.get(keyOf(owner)) ?? { request_id: owner.requestId, generation: owner.generation, pages: [] };
        v.pages.push(page);
        victims.set(keyOf(owner), v);
      }
      return {
        rank: t.rank,
        chunk_index: t.chunkIndex,
        completed_ms: msBetween(t.endNs, startNs),
        pages: t.pages,
        victims: [...victims.values()],
      };
    });
    const flags = new Set<string>();
    if (lateWrites.length > 0) flags.add('late_write');
    if (
      release?.reason === 'timeout' &&
      transfers.some((t) => t.startNs <= release.startNs && (t.endNs > release.startNs || t.status !== 'ok'))
    )
      flags.add('unsafe_release');
    if ((g['pd.drain'] ?? []).some((d) => d.failedSends > 0 && !d.ackWithheld)) flags.add('ack_after_failed_send');
    if (acks.some((a) => a.accepted && a.ackGeneration !== a.generation)) flags.add('stale_ack_consumed');
    const admission = g['pd.admission']?.[0]?.outcome ?? 'accepted';
    if (admission === 'rejected' && (transfers.length > 0 || (g['pd.handoff'] ?? []).length > 0)) flags.add('admission_leak');
    if ((g['pd.checksum'] ?? []).some((c) => c.outcome === 'mismatch')) flags.add('checksum_mismatch');
    if (resolution === 'open') flags.add('open_hold');
    out.set(key, {
      request_id: any.requestId,
      generation: any.generation,
      resolution,
      hold_ms: hold && release ? msBetween(release.startNs, hold.startNs) : null,
      transfer_tail_ms: hold && lastOk !== undefined ? msBetween(lastOk, hold.startNs) : null,
      release_reason: release?.reason ?? null,
      acked_ranks: acks
        .filter((a) => a.accepted)
        .map((a) => a.rank)
        .sort((a, b) => a - b),
      missing_ranks: g['pd.timeout']?.[0]?.missingRanks ?? [],
      stale_acks: {
        accepted: acks.filter((a) => a.ackGeneration !== a.generation && a.accepted).length,
        rejected: acks.filter((a) => a.ackGeneration !== a.generation && !a.accepted).length,
      },
      admission,
      late_writes: lateWrites,
      flags: [...flags].sort() as LifecycleTruth['flags'],
    });
  }
  return out;
}

/** The truth record reduced to the fields `deriveLifecycles` reads back from spans. */
export function comparable(t: LifecycleTruth): DerivedLifecycle {
  return {
    request_id: t.request_id,
    generation: t.generation,
    resolution: t.resolution,
    hold_ms: t.hold_ms,
    transfer_tail_ms: t.transfer_tail_ms,
    release_reason: t.release_reason,
    acked_ranks: t.acked_ranks,
    missing_ranks: t.missing_ranks,
    stale_acks: t.stale_acks,
    admission: t.admission,
    late_writes: t.late_writes,
    flags: t.flags,
  };
}
