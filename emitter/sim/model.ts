import { createHash } from 'node:crypto';
import type { ReleaseReason, TransferStatus } from '../../contract/index.ts';
import type { PdEmitter } from '../instrument.ts';
import type { SimConfig } from './config.ts';
import { MinHeap } from './heap.ts';
import { Rng } from '../../common/index.ts';
import type { DecodeState, Lifecycle, RankState } from './state.ts';
import { LifecycleFlag, type LifecycleTruth } from './truth.ts';
import { lifecycleTruth } from './truth-builder.ts';

/** Where the model's spans go: one emitter per engine, and simulated microseconds to span timestamps. */
export interface SimSink {
  emitter(engineId: string): PdEmitter;
  /** Emits with explicit timestamps; `us` is microseconds since the simulation's start. */
  time(us: number): [number, number];
}

const CHUNK_INFLIGHT = 1;
const CHUNK_OK = 2;
const CHUNK_FAILED = 3;
const CHUNK_TIMEOUT = 4;

type SimEvent =
  | { type: 'arrival'; seq: number; at: number }
  | { type: 'retry'; seq: number; at: number; requestId: string; generation: number }
  | { type: 'alloc'; seq: number; at: number; lc: Lifecycle }
  | { type: 'chunkReady'; seq: number; at: number; lc: Lifecycle }
  | { type: 'chunkDone'; seq: number; at: number; lc: Lifecycle; rank: number; chunk: number; postedUs: number; status: TransferStatus }
  | { type: 'handoff'; seq: number; at: number; lc: Lifecycle }
  | { type: 'finish'; seq: number; at: number; lc: Lifecycle }
  | { type: 'abort'; seq: number; at: number; lc: Lifecycle }
  | { type: 'prefillCancel'; seq: number; at: number; lc: Lifecycle }
  | { type: 'decodeAbort'; seq: number; at: number; lc: Lifecycle }
  | { type: 'rankAbort'; seq: number; at: number; lc: Lifecycle; rank: number }
  | { type: 'ackArrive'; seq: number; at: number; lc: Lifecycle; rank: number; ackGeneration: number }
  | { type: 'holdTimeout'; seq: number; at: number; lc: Lifecycle };

type EventInput = SimEvent extends infer E ? (E extends SimEvent ? Omit<E, 'seq'> : never) : never;

const MS = 1000;
const CHECKSUM_US = 150;

/**
 * The PD cluster as a discrete-event model. Time is integral microseconds since the start, so the same
 * seed gives the same events, spans and truth. Every span is emitted through the emitter of the engine
 * that would emit it, at the simulated instant it describes.
 */
export class ClusterModel {
  private readonly queue = new MinHeap<SimEvent>((a, b) => (a.at === b.at ? a.seq < b.seq : a.at < b.at));
  private seq = 0;
  private arrivals = 0;
  private readonly decodes: DecodeState[];
  private readonly lifecycles: Lifecycle[] = [];
  private readonly rng: { arrivals: Rng; shape: Rng; transfer: Rng; network: Rng; faults: Rng; aborts: Rng; routing: Rng };
  private readonly keepTruth: boolean;
  now = 0;
  spans = 0;

  constructor(
    private readonly config: SimConfig,
    private readonly sink: SimSink,
    options: { keepTruth?: boolean } = {},
  ) {
    this.keepTruth = options.keepTruth ?? true;
    const root = new Rng(config.seed);
    this.rng = {
      arrivals: root.fork('arrivals'),
      shape: root.fork('shape'),
      transfer: root.fork('transfer'),
      network: root.fork('network'),
      faults: root.fork('faults'),
      aborts: root.fork('aborts'),
      routing: root.fork('routing'),
    };
    this.decodes = config.decode.map((spec) => {
      const free = new MinHeap<number>((a, b) => a < b);
      for (let p = 0; p < spec.capacityPages; p++) free.push(p);
      return { spec, free, owner: new Array<Lifecycle | null>(spec.capacityPages).fill(null), waiting: [] };
    });
    if (config.requests > 0 && config.durationMs > 0) this.schedule({ type: 'arrival', at: 0 });
  }

  /** Processes events up to and including simulated time `untilUs`; false once nothing is left to do. */
  runUntil(untilUs: number): boolean {
    for (;;) {
      const next = this.queue.peek();
      if (next === undefined) return false;
      if (next.at > untilUs) return true;
      this.queue.pop();
      this.now = next.at;
      this.handle(next);
    }
  }

  nextEventUs(): number | undefined {
    return this.queue.peek()?.at;
  }

  /** The truth, one record per request generation. Call after the run. */
  truth(): LifecycleTruth[] {
    return this.lifecycles.map((lc) => lifecycleTruth(lc, this.config));
  }

  private schedule(event: EventInput): void {
    this.queue.push({ ...event, seq: this.seq++ } as SimEvent);
  }

  private net(): number {
    const { minMs, jitterMs } = this.config.network;
    return Math.round((minMs + this.rng.network.exponential(jitterMs)) * MS);
  }

  private emit(engineId: string): PdEmitter {
    this.spans++;
    return this.sink.emitter(engineId);
  }

  private at(us: number): { time: [number, number] } {
    return { time: this.sink.time(us) };
  }

  private handle(event: SimEvent): void {
    switch (event.type) {
      case 'arrival':
        return this.onArrival(event.at);
      case 'retry':
        return this.startLifecycle(event.requestId, event.generation);
      case 'alloc':
        return this.onAlloc(event.lc);
      case 'chunkReady':
        return this.onChunkReady(event.lc);
      case 'chunkDone':
        return this.onChunkDone(event.lc, event.rank, event.chunk, event.postedUs, event.status);
      case 'handoff':
        return this.onHandoff(event.lc);
      case 'finish':
        return this.onFinish(event.lc);
      case 'abort':
        return this.onAbort(event.lc);
      case 'prefillCancel':
        for (const rank of event.lc.ranks) rank.stopped = true;
        return;
      case 'decodeAbort':
        return this.onDecodeAbort(event.lc);
      case 'rankAbort':
        return this.onRankAbort(event.lc, event.rank);
      case 'ackArrive':
        return this.onAckArrive(event.lc, event.rank, event.ackGeneration);
      case 'holdTimeout':
        return this.onHoldTimeout(event.lc);
    }
  }

  private onArrival(at: number): void {
    this.arrivals++;
    this.startLifecycle(requestIdFor(this.config, this.arrivals), 0);
    const nextAt = at + Math.max(1, Math.round(this.rng.arrivals.exponential(1e6 / this.config.rate)));
    if (this.arrivals < this.config.requests && nextAt <= this.config.durationMs * MS) this.schedule({ type: 'arrival', at: nextAt });
  }

  private stormMultiplier(us: number): number {
    let m = 1;
    for (const storm of this.config.aborts.storms) {
      if (us >= storm.startMs * MS && us < (storm.startMs + storm.durationMs) * MS) m = Math.max(m, storm.multiplier);
    }
    return m;
  }

  private startLifecycle(requestId: string, generation: number): void {
    const cfg = this.config;
    const decode = this.rng.routing.pick(this.decodes);
    const prefill = this.rng.routing.pick(cfg.prefill.filter((p) => p.backend === decode.spec.backend));
    const tokens = Math.max(
      cfg.chunkTokens / 4,
      Math.min(cfg.prompt.maxTokens, Math.round(this.rng.shape.lognormal(cfg.prompt.medianTokens, cfg.prompt.sigma))),
    );
    const pageSize = decode.spec.pageSize;
    const pagesNeeded = Math.ceil(tokens / pageSize);
    const chunkCount = Math.ceil(tokens / cfg.chunkTokens);
    const lc: Lifecycle = {
      req: { requestId, generation },
      prefill,
      decode,
      arrivalUs: this.now,
      pagesNeeded,
      chunkCount,
      admission: 'accepted',
      leaked: false,
      aborted: false,
      queued: false,
      allocated: false,
      pages: [],
      ranks: Array.from({ length: prefill.ranks }, (_, rank) => ({
        rank,
        ready: 0,
        next: 0,
        inflight: 0,
        status: new Uint8Array(chunkCount),
        stopped: false,
        draining: false,
        drainStartUs: 0,
        inflightAtAbort: 0,
        drained: false,
      })),
      handoffUs: null,
      corrupted: false,
      holdStartUs: null,
      expectedRanks: [],
      ackedRanks: new Set(),
      staleAccepted: 0,
      staleRejected: 0,
      timeoutUs: null,
      missingRanks: [],
      releaseUs: null,
      releaseReason: null,
      lastOkWriteUs: null,
      transfers: { ok: 0, failed: 0, timeout: 0 },
      lateWrites: [],
      flags: new Set(),
      closed: false,
    };
    if (this.keepTruth) this.lifecycles.push(lc);

    const rejected = this.rng.faults.chance(cfg.admission.rejectProbability);
    lc.admission = rejected ? 'rejected' : 'accepted';
    this.emit(ROUTER_ID).admissionDecided(
      lc.req,
      rejected ? { outcome: 'rejected', reason: 'rate_limited' } : { outcome: 'accepted' },
      this.at(this.now),
    );
    if (rejected) {
      lc.leaked = this.rng.faults.chance(cfg.admission.leakProbability);
      if (!lc.leaked) {
        lc.closed = true;
        return;
      }
      lc.flags.add(LifecycleFlag.admissionLeak);
    }
    if (this.rng.aborts.chance(cfg.aborts.probability * this.stormMultiplier(this.now))) {
      const window = (chunkCount * cfg.computeMsPerChunk + 2 * cfg.transfer.medianMs + 5) * 1.3;
      this.schedule({ type: 'abort', at: this.now + Math.round(this.rng.aborts.uniform(0, window) * MS), lc });
    }
    this.schedule({ type: 'alloc', at: this.now + this.net(), lc });
  }

  private onAlloc(lc: Lifecycle): void {
    if (lc.closed) return;
    const decode = lc.decode;
    if (decode.waiting.length > 0 || decode.free.size < lc.pagesNeeded) {
      lc.queued = true;
      decode.waiting.push(lc);
      return;
    }
    this.allocate(lc);
  }

  private allocate(lc: Lifecycle): void {
    const decode = lc.decode;
    lc.queued = false;
    lc.allocated = true;
    // Lowest free pages first, as real allocators tend to: freed pages are reused soonest under pressure.
    for (let i = 0; i < lc.pagesNeeded; i++) {
      const page = decode.free.pop() as number;
      decode.owner[page] = lc;
      lc.pages.push(page);
    }
    this.emit(decode.spec.id).kvAllocated(lc.req, { pages: lc.pages, slots: lc.pagesNeeded * decode.spec.pageSize }, this.at(this.now));
    const computeUs = Math.round(this.config.computeMsPerChunk * MS);
    for (let c = 0; c < lc.chunkCount; c++) this.schedule({ type: 'chunkReady', at: this.now + this.net() + (c + 1) * computeUs, lc });
  }

  private releasePages(lc: Lifecycle, reason: ReleaseReason): void {
    const decode = lc.decode;
    lc.releaseUs = this.now;
    lc.releaseReason = reason;
    lc.closed = reason === 'finished' || reason === 'forced' || lc.closed;
    this.emit(decode.spec.id).released(lc.req, { reason, pages: lc.pages }, this.at(this.now));
    for (const page of lc.pages) {
      if (decode.owner[page] === lc) {
        decode.owner[page] = null;
        decode.free.push(page);
      }
    }
    while (decode.waiting.length > 0) {
      const head = decode.waiting[0] as Lifecycle;
      if (head.closed) {
        decode.waiting.shift();
        continue;
      }
      if (decode.free.size < head.pagesNeeded) break;
      decode.waiting.shift();
      this.allocate(head);
    }
  }

  private chunkPages(lc: Lifecycle, chunk: number): number[] {
    const perChunk = this.config.chunkTokens / lc.decode.spec.pageSize;
    return lc.pages.slice(chunk * perChunk, Math.min(lc.pages.length, (chunk + 1) * perChunk));
  }

  private onChunkReady(lc: Lifecycle): void {
    for (const rank of lc.ranks) {
      rank.ready++;
      this.postChunks(lc, rank);
    }
  }

  private postChunks(lc: Lifecycle, rank: RankState): void {
    const t = this.config.transfer;
    while (!rank.stopped && rank.inflight < t.maxInflightPerRank && rank.next < rank.ready) {
      const chunk = rank.next++;
      rank.inflight++;
      rank.status[chunk] = CHUNK_INFLIGHT;
      const rng = this.rng.transfer;
      const roll = rng.next();
      let status: TransferStatus = 'ok';
      let latencyMs = rng.chance(t.tailProbability) ? rng.pareto(t.tailScaleMs, t.tailAlpha) : rng.lognormal(t.medianMs, t.sigma);
      if (roll < t.failProbability) {
        status = 'failed';
        latencyMs /= 2;
      } else if (roll < t.failProbability + t.timeoutProbability || latencyMs > t.callTimeoutMs) {
        // The call gives up at its own timeout; whether the write stopped underneath is unknown.
        status = 'timeout';
        latencyMs = t.callTimeoutMs;
      }
      this.schedule({
        type: 'chunkDone',
        at: this.now + Math.max(1, Math.round(latencyMs * MS)),
        lc,
        rank: rank.rank,
        chunk,
        postedUs: this.now,
        status,
      });
    }
  }

  private onChunkDone(lc: Lifecycle, rankIndex: number, chunk: number, postedUs: number, status: TransferStatus): void {
    const rank = lc.ranks[rankIndex] as RankState;
    const pages = this.chunkPages(lc, chunk);
    rank.inflight--;
    rank.status[chunk] = status === 'ok' ? CHUNK_OK : status === 'failed' ? CHUNK_FAILED : CHUNK_TIMEOUT;
    lc.transfers[status]++;
    this.emit(lc.prefill.id).transferChunk(
      lc.req,
      {
        rank: rankIndex,
        chunkIndex: chunk,
        pages,
        status,
        bytes: pages.length * this.config.transfer.bytesPerPage,
        decodeEngineId: lc.decode.spec.id,
      },
      { start: this.sink.time(postedUs), end: this.sink.time(this.now) },
    );
    if (status === 'ok') {
      lc.lastOkWriteUs = this.now;
      this.landWrite(lc, rankIndex, chunk, pages);
    } else if (!lc.aborted && lc.holdStartUs === null) {
      // Prefill gives up on the request; decode learns of the failure and aborts it, which starts a hold.
      lc.aborted = true;
      for (const r of lc.ranks) r.stopped = true;
      this.schedule({ type: 'decodeAbort', at: this.now + this.net(), lc });
    }
    if (rank.draining && !rank.drained && rank.inflight === 0) this.finishDrain(lc, rank);
    this.postChunks(lc, rank);
    if (
      !lc.aborted &&
      lc.handoffUs === null &&
      lc.ranks.every((r) => r.next === lc.chunkCount && r.inflight === 0 && r.status.every((s) => s === CHUNK_OK))
    ) {
      this.schedule({ type: 'handoff', at: this.now + this.net(), lc });
    }
  }

  /** A completed write: late if its generation already released the pages; it corrupts whoever owns them now. */
  private landWrite(lc: Lifecycle, rank: number, chunk: number, pages: number[]): void {
    if (lc.releaseUs === null) return;
    const victims = new Map<Lifecycle, number[]>();
    for (const page of pages) {
      const owner = lc.decode.owner[page];
      if (owner && owner !== lc) {
        const list = victims.get(owner) ?? [];
        list.push(page);
        victims.set(owner, list);
        if (owner.handoffUs === null) owner.corrupted = true;
      }
    }
    lc.flags.add(LifecycleFlag.lateWrite);
    lc.lateWrites.push({
      rank,
      chunk_index: chunk,
      completed_ms: this.now / MS,
      pages,
      victims: [...victims].map(([owner, vpages]) => ({
        request_id: owner.req.requestId,
        generation: owner.req.generation,
        pages: vpages,
      })),
    });
  }

  private onHandoff(lc: Lifecycle): void {
    if (lc.aborted || lc.closed) return;
    const decodeId = lc.decode.spec.id;
    if (this.config.faults.checksums) {
      const outcome = lc.corrupted ? 'mismatch' : 'ok';
      // The check ran just before this commit point: it reads the KV that landed.
      this.emit(decodeId).checksumChecked(
        lc.req,
        { outcome },
        { start: this.sink.time(Math.max(0, this.now - CHECKSUM_US)), end: this.sink.time(this.now) },
      );
      if (outcome === 'mismatch') {
        // The corrupted KV is never decoded: decode fails the request and frees its pages.
        lc.flags.add(LifecycleFlag.checksumMismatch);
        this.releasePages(lc, 'forced');
        return;
      }
    }
    lc.handoffUs = this.now;
    this.emit(decodeId).handoff(lc.req, this.at(this.now));
    const d = this.config.decodeMsPerRequest;
    this.schedule({ type: 'finish', at: this.now + Math.round(this.rng.shape.lognormal(d.median, d.sigma) * MS), lc });
  }

  private onFinish(lc: Lifecycle): void {
    if (lc.closed || lc.releaseUs !== null) return;
    this.releasePages(lc, 'finished');
  }

  private onAbort(lc: Lifecycle): void {
    if (lc.closed || lc.aborted) return;
    lc.aborted = true;
    this.emit(ROUTER_ID).cancelled(lc.req, { targets: [lc.prefill.id, lc.decode.spec.id] }, this.at(this.now));
    // The router cancels both sides together: prefill stops posting, decode starts its hold.
    this.schedule({ type: 'prefillCancel', at: this.now + this.net(), lc });
    this.schedule({ type: 'decodeAbort', at: this.now + this.net(), lc });
  }

  private onDecodeAbort(lc: Lifecycle): void {
    const cfg = this.config;
    if (lc.closed || lc.holdStartUs !== null || lc.releaseUs !== null) return;
    if (cfg.aborts.retryProbability > 0 && lc.req.generation < 4 && this.rng.aborts.chance(cfg.aborts.retryProbability)) {
      this.schedule({
        type: 'retry',
        at: this.now + Math.round(cfg.aborts.retryDelayMs * MS),
        requestId: lc.req.requestId,
        generation: lc.req.generation + 1,
      });
    }
    if (!lc.allocated) {
      lc.closed = true;
      return;
    }
    if (lc.handoffUs !== null) {
      // Every write completed before handoff: nothing can land later, so no hold is needed.
      this.releasePages(lc, 'forced');
      return;
    }
    const spec = lc.decode.spec;
    const expected = Math.max(lc.prefill.ranks, spec.abortFanoutRanks);
    lc.holdStartUs = this.now;
    lc.expectedRanks = Array.from({ length: expected }, (_, i) => i);
    this.emit(spec.id).holdStarted(
      lc.req,
      { expectedRanks: lc.expectedRanks, timeoutMs: spec.holdTimeoutMs, slots: lc.pagesNeeded * spec.pageSize, pages: lc.pages },
      this.at(this.now),
    );
    for (const rank of lc.ranks) this.schedule({ type: 'rankAbort', at: this.now + this.net(), lc, rank: rank.rank });
    this.schedule({ type: 'holdTimeout', at: this.now + spec.holdTimeoutMs * MS, lc });
    if (lc.req.generation > 0 && this.rng.faults.chance(cfg.faults.staleAckProbability)) {
      const rank = this.rng.faults.int(0, lc.prefill.ranks - 1);
      this.schedule({ type: 'ackArrive', at: this.now + this.net(), lc, rank, ackGeneration: lc.req.generation - 1 });
    }
  }

  private onRankAbort(lc: Lifecycle, rankIndex: number): void {
    const rank = lc.ranks[rankIndex] as RankState;
    rank.stopped = true;
    // A backend without the ack protocol never learns of the hold: no drain, no ack.
    if (!lc.prefill.ackProtocol || rank.draining) return;
    rank.draining = true;
    rank.drainStartUs = this.now;
    rank.inflightAtAbort = rank.inflight;
    if (rank.inflight === 0) this.finishDrain(lc, rank);
  }

  private finishDrain(lc: Lifecycle, rank: RankState): void {
    const faults = this.config.faults;
    rank.drained = true;
    let failedSends = 0;
    for (const s of rank.status) if (s === CHUNK_FAILED || s === CHUNK_TIMEOUT) failedSends++;
    const withheld = failedSends > 0 && !this.rng.faults.chance(faults.ackAfterFailedSendProbability);
    if (failedSends > 0 && !withheld) lc.flags.add(LifecycleFlag.ackAfterFailedSend);
    this.emit(lc.prefill.id).drained(
      lc.req,
      {
        rank: rank.rank,
        chunksDropped: lc.chunkCount - rank.next,
        inflight: rank.inflightAtAbort,
        failedSends,
        ackWithheld: withheld,
        decodeEngineId: lc.decode.spec.id,
      },
      { start: this.sink.time(rank.drainStartUs), end: this.sink.time(this.now) },
    );
    if (withheld || this.rng.faults.chance(faults.ackLossProbability)) return;
    this.schedule({ type: 'ackArrive', at: this.now + this.net(), lc, rank: rank.rank, ackGeneration: lc.req.generation });
  }

  private onAckArrive(lc: Lifecycle, rank: number, ackGeneration: number): void {
    const stale = ackGeneration !== lc.req.generation;
    const holdOpen = lc.holdStartUs !== null && lc.releaseUs === null;
    const counts =
      holdOpen && (!stale || this.config.faults.staleAckAccepted) && lc.expectedRanks.includes(rank) && !lc.ackedRanks.has(rank);
    if (stale) {
      if (counts) lc.staleAccepted++;
      else lc.staleRejected++;
      if (counts) lc.flags.add(LifecycleFlag.staleAckConsumed);
    }
    this.emit(lc.decode.spec.id).ackReceived(lc.req, { rank, ackGeneration, accepted: counts }, this.at(this.now));
    if (!counts) return;
    lc.ackedRanks.add(rank);
    if (lc.expectedRanks.every((r) => lc.ackedRanks.has(r))) this.releasePages(lc, 'drained');
  }

  private onHoldTimeout(lc: Lifecycle): void {
    if (lc.releaseUs !== null) return;
    const spec = lc.decode.spec;
    lc.timeoutUs = this.now;
    lc.missingRanks = lc.expectedRanks.filter((r) => !lc.ackedRanks.has(r));
    this.emit(spec.id).timeoutFired(lc.req, { missingRanks: lc.missingRanks, action: spec.timeoutAction }, this.at(this.now));
    if (spec.timeoutAction === 'quarantine') return;
    // A timeout is no completion evidence: writes still in flight, failed or timed out may land later.
    if (lc.ranks.some((r) => r.status.some((s) => s === CHUNK_INFLIGHT || s === CHUNK_FAILED || s === CHUNK_TIMEOUT))) {
      lc.flags.add(LifecycleFlag.unsafeRelease);
    }
    this.releasePages(lc, 'timeout');
  }
}

export const ROUTER_ID = 'router-0';

/** The request id of the `arrival`-th request (SimConfig.requestIds). */
function requestIdFor(config: Pick<SimConfig, 'idPrefix' | 'requestIds'>, arrival: number): string {
  if (config.requestIds !== 'random') return `${config.idPrefix}-${String(arrival).padStart(6, '0')}`;
  return `cmpl-${createHash('sha256').update(`${config.idPrefix}\u0000${arrival}`).digest('hex').slice(0, 32)}`;
}
