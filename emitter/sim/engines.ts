import { createHash } from 'node:crypto';
import { ROOT_CONTEXT, trace, TraceFlags, type Context } from '@opentelemetry/api';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import { lifecycleKeyId, ResourceAttr } from '../../contract/index.ts';
import type { RequestRef } from '../instrument.ts';
import type { SimConfig } from './config.ts';
import { ROUTER_ID } from './model.ts';

/** One simulated engine process: its id and the OpenTelemetry resource it reports under. */
export interface SimEngine {
  id: string;
  resource: Resource;
}

/** Every engine of a deployment under test carries its arm and run; the contract takes none rather than an empty one. */
function experimentAttributes(config: SimConfig): Record<string, string> {
  const out: Record<string, string> = {};
  if (config.experiment?.arm) out[ResourceAttr.experimentArm] = config.experiment.arm;
  if (config.experiment?.run) out[ResourceAttr.experimentRun] = config.experiment.run;
  return out;
}

/** The resources of every engine of a simulated cluster, as real engines would report them. */
export function simulatedEngines(config: SimConfig): SimEngine[] {
  const common = { [ResourceAttr.cluster]: config.cluster, ...experimentAttributes(config) };
  const engines: SimEngine[] = [
    {
      id: ROUTER_ID,
      resource: resourceFromAttributes({
        ...common,
        [ResourceAttr.serviceName]: 'pd-router',
        [ResourceAttr.role]: 'router',
        [ResourceAttr.engineId]: ROUTER_ID,
        [ResourceAttr.engineVersion]: 'router-1.0',
      }),
    },
  ];
  for (const p of config.prefill) {
    engines.push({
      id: p.id,
      resource: resourceFromAttributes({
        ...common,
        [ResourceAttr.serviceName]: 'pd-prefill',
        [ResourceAttr.role]: 'prefill',
        [ResourceAttr.engineId]: p.id,
        [ResourceAttr.engineVersion]: p.version,
        [ResourceAttr.transferBackend]: p.backend,
      }),
    });
  }
  for (const d of config.decode) {
    engines.push({
      id: d.id,
      resource: resourceFromAttributes({
        ...common,
        [ResourceAttr.serviceName]: 'pd-decode',
        [ResourceAttr.role]: 'decode',
        [ResourceAttr.engineId]: d.id,
        [ResourceAttr.engineVersion]: d.version,
        [ResourceAttr.transferBackend]: d.backend,
        [ResourceAttr.kvCapacitySlots]: d.capacityPages * d.pageSize,
      }),
    });
  }
  return engines;
}

/**
 * Every span of one request generation shares a trace, under a remote parent derived from its key, so
 * trace viewers group a lifecycle's spans across engines as a propagated context would.
 */
export function lifecycleContext(cluster: string, req: RequestRef): Context {
  const digest = createHash('sha256')
    .update(lifecycleKeyId(cluster, req.requestId, req.generation))
    .digest('hex');
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: digest.slice(0, 32),
    spanId: digest.slice(32, 48),
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  });
}

/** Simulated microseconds since start to an exact [seconds, nanoseconds] timestamp. */
export function simClock(startTimeMs: number): (us: number) => [number, number] {
  const baseSec = Math.floor(startTimeMs / 1000);
  const baseNs = (startTimeMs - baseSec * 1000) * 1e6;
  return (us: number) => {
    const whole = Math.floor(us / 1e6);
    let ns = baseNs + (us - whole * 1e6) * 1000;
    let sec = baseSec + whole;
    if (ns >= 1e9) {
      sec += 1;
      ns -= 1e9;
    }
    return [sec, Math.round(ns)];
  };
}
