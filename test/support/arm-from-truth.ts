/**
 * One arm of `holdscope compare` built from the simulator's truth instead of from ClickHouse, for tests that need
 * hundreds of seeded arms (the intervals' coverage): running the stack that often would take longer than the suite.
 * The summary has the fields compare_arm.sql returns, counted as that query counts them over lifecycle_holds; that
 * the stored records equal the truth lifecycle by lifecycle is test/integration/compare.test.ts's (and
 * truth-check.ts's) to prove, so what is left to measure here is the statistics alone.
 */
import { Rng } from '../../common/index.ts';
import {
  buildScenario,
  ClusterModel,
  type LifecycleTruth,
  type PdEmitter,
  type ScenarioName,
  type SimConfig,
  type SimSink,
} from '../../emitter/index.ts';
import { COMPARE_SAMPLE_SIZE, type ArmSummary } from '../../queries/compare.ts';

/** Every emitter call goes nowhere: the truth is the model's own and does not depend on spans being exported. */
const silent: PdEmitter = new Proxy({} as PdEmitter, { get: () => () => undefined });
const silentSink: SimSink = { emitter: () => silent, time: (us) => [us, 0] };

/** The truth of one scenario run to its end in-process, with no exporter: about 0.25 ms of CPU per request. */
export function simulateTruth(name: ScenarioName, seed: number, adjust: (config: SimConfig) => void = () => undefined): LifecycleTruth[] {
  const { config } = buildScenario(name, seed);
  config.idPrefix = `${name}-${seed}`;
  adjust(config);
  const model = new ClusterModel(config, silentSink);
  if (model.runUntil(Number.POSITIVE_INFINITY)) throw new Error(`${name} seed ${seed}: the model stopped with events left`);
  return model.truth();
}

/** A uniform sample of at most `size` values (reservoir sampling), as groupArraySample draws one in compare_arm.sql. */
function uniformSample(values: number[], size: number, rng: Rng): number[] {
  if (values.length <= size) return values;
  const sample = values.slice(0, size);
  for (let i = size; i < values.length; i++) {
    const j = Math.floor(rng.next() * (i + 1));
    if (j < size) sample[j] = values[i] as number;
  }
  return sample;
}

/**
 * What compare_arm.sql would return for an arm holding exactly these lifecycles: a hold is a lifecycle with a hold
 * start (lifecycle_holds' rows), late writes are summed over holds, unsafe releases counted as holds. The storm peak
 * is not derived (it needs kv_pinned.sql's minute series): null, as for an arm without a storm.
 */
export function armSummaryFromTruth(truth: readonly LifecycleTruth[], sampleSeed = 1): ArmSummary {
  const holds = truth.filter((t) => t.hold_start_ms !== null);
  const count = (pred: (t: LifecycleTruth) => boolean) => holds.filter(pred).length;
  const rng = new Rng(sampleSeed);
  const drains = holds.flatMap((t) => (t.resolution === 'drained' && t.hold_ms !== null ? [t.hold_ms] : []));
  const tails = holds.flatMap((t) => (t.transfer_tail_ms !== null ? [t.transfer_tail_ms] : []));
  return {
    holds: holds.length,
    drained: count((t) => t.resolution === 'drained'),
    timeouts: count((t) => t.resolution === 'timeout'),
    open: count((t) => t.resolution === 'open'),
    lateWrites: holds.reduce((sum, t) => sum + t.late_writes.length, 0),
    unsafeReleases: count((t) => t.flags.includes('unsafe_release')),
    tails: tails.length,
    drainSample: uniformSample(drains, COMPARE_SAMPLE_SIZE, rng),
    tailSample: uniformSample(tails, COMPARE_SAMPLE_SIZE, rng),
    peakPinnedShare: null,
    stormWindows: 0,
  };
}
