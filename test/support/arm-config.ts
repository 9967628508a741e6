import type { SimConfig } from '../../emitter/index.ts';

/**
 * The traffic of one arm in the comparison tests: half the requests aborted, none retried, so about half hold;
 * `ackLoss` of the acks lost, each on its own; and a hold timeout short enough for a timed-out hold to resolve
 * within a run of seconds.
 */
export function abortHeavyArm(c: SimConfig, arm: { requests: number; ackLoss: number; holdTimeoutMs: number }): void {
  c.requests = arm.requests;
  c.aborts.probability = 0.5;
  c.aborts.retryProbability = 0;
  c.faults.ackLossProbability = arm.ackLoss;
  c.decode = c.decode.map((d) => ({ ...d, holdTimeoutMs: arm.holdTimeoutMs }));
}
