export { createPdEmitter, INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION } from './instrument.ts';
export type { EmitterDefaults, InstantOptions, IntervalOptions, PdEmitter, RequestRef } from './instrument.ts';
export type { SimConfig, PrefillEngineSpec, DecodeEngineSpec, AbortStorm } from './sim/config.ts';
export { buildScenario, isScenarioName, SCENARIO_NAMES, type Scenario, type ScenarioName } from './sim/scenarios.ts';
export { ClusterModel, ROUTER_ID, type SimSink } from './sim/model.ts';
export { formatTruth, LifecycleFlag, type LifecycleTruth, type LateWriteTruth, type LateWriteVictim } from './sim/truth.ts';
export { simulatedEngines, lifecycleContext, simClock, type SimEngine } from './sim/engines.ts';
export { runSimulation, type SimulationOptions, type SimulationSummary } from './sim/run.ts';
export { Rng } from './sim/rng.ts';
