import type { TimeoutAction } from '../../contract/index.ts';

export interface PrefillEngineSpec {
  id: string;
  version: string;
  backend: string;
  ranks: number;
  /** False models a backend or version that never sends ABORT_ACK (NIXL before SGLang PR 35360). */
  ackProtocol: boolean;
}

export interface DecodeEngineSpec {
  id: string;
  version: string;
  backend: string;
  /** KV pages in the pool; capacity in slots is pages × pageSize. */
  capacityPages: number;
  pageSize: number;
  holdTimeoutMs: number;
  timeoutAction: TimeoutAction;
  /**
   * Decode ranks that send ABORT for one request. Larger than the prefill's rank count models MLA fan-out
   * (prefill TP smaller than decode TP): the extra ranks are expected but never acknowledged.
   */
  abortFanoutRanks: number;
}

export interface AbortStorm {
  startMs: number;
  durationMs: number;
  /** Multiplies the baseline abort probability inside the storm. */
  multiplier: number;
}

/** Every knob of one simulation. Scenarios fill it; the CLI overrides seed, rate and size. */
export interface SimConfig {
  seed: number;
  cluster: string;
  /** Prefix of request ids, so runs with different seeds never share ids. */
  idPrefix: string;
  /**
   * How request ids look. 'sequential' (the default): `<idPrefix>-000001`, in arrival order, easy to read in a test.
   * 'random': `cmpl-` and 32 hex digits, as vLLM names requests (`cmpl-<uuid>`), with no order in time; derived from
   * idPrefix and the arrival number, so a run is still reproducible and runs with different prefixes never share ids.
   * Tables keyed by request id store such ids scattered, which is what a real cluster's traffic does to them.
   */
  requestIds?: 'sequential' | 'random';
  /** Arrivals stop after this many requests or this much simulated time, whichever comes first. */
  requests: number;
  durationMs: number;
  /** Poisson arrival rate, requests per second. */
  rate: number;
  prefill: PrefillEngineSpec[];
  decode: DecodeEngineSpec[];
  prompt: { medianTokens: number; sigma: number; maxTokens: number };
  chunkTokens: number;
  computeMsPerChunk: number;
  decodeMsPerRequest: { median: number; sigma: number };
  transfer: {
    /** Lognormal body of one chunk write. */
    medianMs: number;
    sigma: number;
    /** Share of chunks drawn from a Pareto tail instead. */
    tailProbability: number;
    tailScaleMs: number;
    tailAlpha: number;
    /** Bounded transfer batches: launched, uncompleted writes per rank. */
    maxInflightPerRank: number;
    failProbability: number;
    timeoutProbability: number;
    /** How long a call takes to return `timeout`. */
    callTimeoutMs: number;
    bytesPerPage: number;
  };
  /** One-way delay of control messages (cancel, ABORT, ack). */
  network: { minMs: number; jitterMs: number };
  aborts: {
    /** Probability that a request is aborted, outside storms. */
    probability: number;
    storms: AbortStorm[];
    /** Probability that an aborted request is retried under the same id, as the next generation. */
    retryProbability: number;
    retryDelayMs: number;
  };
  admission: {
    rejectProbability: number;
    /** Bug: a rejected request continues through handoff anyway. */
    leakProbability: number;
  };
  faults: {
    /** Ack target dropped before the drain finishes: the ack never reaches decode. */
    ackLossProbability: number;
    /** Bug: a rank with failed sends acknowledges anyway. */
    ackAfterFailedSendProbability: number;
    /** An ack of the previous generation reaches a reused id's hold. */
    staleAckProbability: number;
    /** Bug: decode counts such a stale ack. */
    staleAckAccepted: boolean;
    /** PD checksums at handoff commit. */
    checksums: boolean;
  };
  /** How long after its timeout an unreleased hold counts as open in the truth. */
  openHoldGraceMs: number;
  /**
   * The experiment arm and run every engine's resource carries (`pd.experiment.arm`, `pd.experiment.run`); an empty
   * one is left off. Unset: the engines are in no experiment, as most deployments are.
   */
  experiment?: { arm: string; run: string };
}
