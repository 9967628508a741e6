// Statistics for rollout comparisons and hold-timeout advice: intervals, verdicts and tail fits; pure functions, no I/O.
export type { DifferenceInterval, DifferenceMethod, Interval } from './interval.ts';
export { newcombeDifference, wilsonInterval, type Proportion } from './proportions.ts';
export { RATE_PER_HOLDS, rateDifference, type PoissonCount } from './rates.ts';
export { quantileDifference, sortAscending, type QuantileInterval, type QuantileIntervalOptions } from './quantiles.ts';
export { welchDifference } from './welch.ts';
export { judge, type Direction, type JudgeOptions, type Judgement } from './verdict.ts';
export { adviseTimeout, type AdviceOptions, type TimeoutAdvice } from './timeout-advice.ts';
export { trueExceedanceProbability, type GeneralizedPareto, type KnownDistribution } from './tail.ts';
