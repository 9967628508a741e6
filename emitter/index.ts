export { createPdEmitter } from './instrument.ts';
export type { EmitterDefaults, InstantOptions, IntervalOptions, PdEmitter, RequestRef } from './instrument.ts';
export type { SimConfig, PrefillEngineSpec, DecodeEngineSpec, AbortStorm } from './sim/config.ts';
export { buildScenario, SCENARIO_NAMES, type Scenario, type ScenarioName } from './sim/scenarios.ts';
export { ClusterModel, type SimSink } from './sim/model.ts';
export { formatTruth, LifecycleFlag, type LifecycleTruth, type LateWriteTruth, type LateWriteVictim } from './sim/truth.ts';
export { runSimulation, type SimulationOptions, type SimulationSummary } from './sim/run.ts';
