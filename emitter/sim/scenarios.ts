import type { DecodeEngineSpec, PrefillEngineSpec, SimConfig } from './config.ts';

export const SCENARIO_NAMES = ['steady', 'abort-storm', 'ack-loss', 'no-ack-backend', 'late-write-bug', 'mixed'] as const;
export type ScenarioName = (typeof SCENARIO_NAMES)[number];

export interface Scenario {
  name: ScenarioName;
  description: string;
  /** Distribution flags the detections should raise on this scenario (per-lifecycle flags are in the truth). */
  expectedDistributionFlags: string[];
  /**
   * The alerts `holdscope start` on this scenario raises within about three minutes (pushed violations and Prometheus
   * rules as shipped), checked by test/integration/alerting-e2e.test.ts for the scenarios that give them; [] means no
   * critical alert, not even pending. Absent: not checked end to end.
   */
  expectedAlerts?: string[];
  config: SimConfig;
}

const prefill = (id: string, over: Partial<PrefillEngineSpec> = {}): PrefillEngineSpec => ({
  id,
  version: 'sglang-0.5.4',
  backend: 'mooncake',
  ranks: 2,
  ackProtocol: true,
  ...over,
});

const decode = (id: string, over: Partial<DecodeEngineSpec> = {}): DecodeEngineSpec => ({
  id,
  version: 'sglang-0.5.4',
  backend: 'mooncake',
  capacityPages: 65536,
  pageSize: 16,
  // SGLang's default SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT.
  holdTimeoutMs: 30_000,
  timeoutAction: 'release',
  abortFanoutRanks: 2,
  ...over,
});

/** A healthy cluster: the ack protocol works, aborts are rare and every hold drains. */
function base(seed: number): SimConfig {
  return {
    seed,
    cluster: 'default',
    idPrefix: `s${seed}`,
    requests: 3000,
    durationMs: 15_000,
    rate: 200,
    prefill: [prefill('prefill-0'), prefill('prefill-1')],
    decode: [decode('decode-0'), decode('decode-1')],
    prompt: { medianTokens: 2048, sigma: 0.8, maxTokens: 32768 },
    chunkTokens: 512,
    computeMsPerChunk: 15,
    decodeMsPerRequest: { median: 1000, sigma: 0.5 },
    transfer: {
      medianMs: 20,
      sigma: 0.5,
      tailProbability: 0.01,
      tailScaleMs: 80,
      tailAlpha: 2.5,
      maxInflightPerRank: 4,
      failProbability: 0,
      timeoutProbability: 0,
      // Mooncake's default MC_TRANSFER_TIMEOUT.
      callTimeoutMs: 30_000,
      bytesPerPage: 16 * 2 * 64 * 128 * 2,
    },
    network: { minMs: 0.2, jitterMs: 0.5 },
    aborts: { probability: 0.03, storms: [], retryProbability: 0.3, retryDelayMs: 50 },
    admission: { rejectProbability: 0.01, leakProbability: 0 },
    faults: { ackLossProbability: 0, ackAfterFailedSendProbability: 0, staleAckProbability: 0, staleAckAccepted: false, checksums: false },
    openHoldGraceMs: 5_000,
  };
}

// eslint-disable-next-line max-lines-per-function -- the table of scenarios, one entry each
function scenario(name: ScenarioName, seed: number): Scenario {
  const c = base(seed);
  switch (name) {
    case 'steady':
      return {
        name,
        description: 'healthy ack protocol, rare aborts: every hold drains',
        expectedDistributionFlags: [],
        expectedAlerts: [],
        config: c,
      };
    case 'abort-storm':
      // The storm comes once the engines have a baseline of their own (a minute of whole 10 s windows: a cold
      // start is no storm), so `npm start --scenario abort-storm` shows it 80 s in.
      c.requests = 10_000;
      c.durationMs = 100_000;
      c.rate = 100;
      c.aborts.probability = 0.04;
      c.aborts.storms = [{ startMs: 80_000, durationMs: 10_000, multiplier: 8 }];
      // A few lost acks make holds wait out the full timeout, pinning KV while the storm lasts; the decode
      // pools run at about two thirds of capacity before the storm, so pinned pages are felt.
      c.faults.ackLossProbability = 0.1;
      c.decode = [decode('decode-0', { capacityPages: 14_000 }), decode('decode-1', { capacityPages: 14_000 })];
      return {
        name,
        description: 'an abort storm (8x the baseline abort rate for 10 s, 80 s in) with 10% of acks lost',
        expectedDistributionFlags: ['kv_capacity_exhaustion'],
        expectedAlerts: ['HoldscopeKvExhaustionInAbortStorm'],
        config: c,
      };
    case 'ack-loss':
      c.aborts.probability = 0.08;
      c.faults.ackLossProbability = 0.3;
      return {
        name,
        description: 'the ack target is dropped before the drain finishes for 30% of acks',
        expectedDistributionFlags: ['timeout_heavy'],
        expectedAlerts: [],
        config: c,
      };
    case 'no-ack-backend':
      c.aborts.probability = 0.08;
      c.prefill = [
        prefill('prefill-0', { backend: 'nixl', version: 'sglang-0.4.9', ackProtocol: false }),
        prefill('prefill-1', { backend: 'nixl', version: 'sglang-0.4.9', ackProtocol: false }),
      ];
      c.decode = [decode('decode-0', { backend: 'nixl' }), decode('decode-1', { backend: 'nixl' })];
      return {
        name,
        description: 'a transfer backend without the ack protocol: every abort waits out the timeout',
        expectedDistributionFlags: ['timeout_heavy', 'pairing_incompatible'],
        config: c,
      };
    case 'late-write-bug':
      c.aborts.probability = 0.15;
      c.transfer.tailProbability = 0.1;
      c.transfer.tailScaleMs = 150;
      c.transfer.tailAlpha = 1.2;
      // A hold timeout far below the transfer tail, while allocations are frequent: released pages are reused within milliseconds.
      c.decode = [decode('decode-0', { holdTimeoutMs: 300 }), decode('decode-1', { holdTimeoutMs: 300 })];
      return {
        name,
        description: 'release on a 300 ms timeout while writes still land, onto pages already reused',
        expectedDistributionFlags: ['long_transfer_tail', 'timeout_heavy'],
        config: c,
      };
    case 'mixed':
      c.requests = 5000;
      c.durationMs = 20_000;
      c.rate = 250;
      c.aborts.probability = 0.08;
      c.aborts.storms = [{ startMs: 8_000, durationMs: 4_000, multiplier: 5 }];
      c.aborts.retryProbability = 0.6;
      c.transfer.failProbability = 0.004;
      c.transfer.timeoutProbability = 0.002;
      c.transfer.callTimeoutMs = 2_000;
      c.transfer.tailProbability = 0.04;
      c.transfer.tailScaleMs = 120;
      c.transfer.tailAlpha = 1.3;
      c.admission = { rejectProbability: 0.02, leakProbability: 0.3 };
      c.faults = {
        ackLossProbability: 0.03,
        ackAfterFailedSendProbability: 0.5,
        staleAckProbability: 0.5,
        staleAckAccepted: true,
        checksums: true,
      };
      c.prefill = [
        prefill('prefill-0'),
        prefill('prefill-1', { version: 'sglang-0.5.3' }),
        prefill('prefill-2', { backend: 'nixl', version: 'sglang-0.4.9', ackProtocol: false }),
      ];
      c.decode = [
        decode('decode-0', { timeoutAction: 'quarantine' }),
        decode('decode-1', { holdTimeoutMs: 400 }),
        decode('decode-2', { version: 'sglang-0.5.4-mla', abortFanoutRanks: 4 }),
        decode('decode-3', { backend: 'nixl', version: 'sglang-0.4.9' }),
      ];
      return {
        name,
        description:
          'every failure mode at once: quarantine, a short timeout, MLA fan-out, a no-ack backend, ack bugs, admission leaks, checksums',
        expectedDistributionFlags: ['timeout_heavy', 'pairing_incompatible', 'long_transfer_tail'],
        expectedAlerts: [
          'HoldscopeLateWrite',
          'HoldscopeUnsafeRelease',
          'HoldscopeAckAfterFailedSend',
          'HoldscopeStaleAckConsumed',
          'HoldscopeAdmissionLeak',
          'HoldscopeChecksumMismatch',
          'HoldscopeLongTransferTail',
          'HoldscopePairingIncompatible',
          'HoldscopeTimeoutHeavy',
          'HoldscopeKvPinned',
          'HoldscopeOpenHolds',
        ],
        config: c,
      };
  }
}

export function buildScenario(name: ScenarioName, seed = 1): Scenario {
  return scenario(name, seed);
}
