import { writeFile } from 'node:fs/promises';
import { z } from 'zod';
import { nonNegativeInt, parseConfig, positiveNumber } from '../common/config.ts';
import { createLogger } from '../common/index.ts';
import { buildScenario, formatTruth, runSimulation, SCENARIO_NAMES, type SimulationSummary } from '../emitter/index.ts';

export const simulateSchema = z.object({
  scenario: z.enum(SCENARIO_NAMES),
  seed: nonNegativeInt(),
  rate: positiveNumber('a request rate > 0 (requests/s)').optional(),
  requests: nonNegativeInt().optional(),
  duration: positiveNumber('a duration > 0 (seconds)').optional(),
  endpoint: z.url({ error: 'expected an http(s) URL' }),
  truth: z.string().min(1).optional(),
  startTime: z.iso.datetime({ error: 'expected an ISO 8601 date-time such as 2026-01-31T12:00:00Z' }).optional(),
  pace: z.enum(['fast', 'realtime']),
  cluster: z.string().min(1).max(200).optional(),
});
export type SimulateOptions = z.output<typeof simulateSchema>;

export const flagName = (key: string) => '--' + key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());

/** Runs one simulation as the CLI's `simulate` asks, printing progress on a TTY and a summary at the end. */
export async function simulateCommand(raw: Record<string, unknown>, signal?: AbortSignal): Promise<SimulationSummary> {
  const options = parseConfig(simulateSchema, raw, flagName);
  const log = createLogger('simulate');
  const scenario = buildScenario(options.scenario, options.seed);
  const config = scenario.config;
  if (options.rate !== undefined) config.rate = options.rate;
  if (options.requests !== undefined) config.requests = options.requests;
  if (options.duration !== undefined) config.durationMs = options.duration * 1000;
  if (options.cluster !== undefined) config.cluster = options.cluster;
  if (options.duration !== undefined && options.requests === undefined) config.requests = Number.MAX_SAFE_INTEGER;
  // In fast mode the run's arrivals end about now, so "recent" dashboards and time windows show it.
  const arrivalWindowMs = Math.min(config.durationMs, (config.requests / config.rate) * 1000);
  const startTimeMs = options.startTime ? Date.parse(options.startTime) : options.pace === 'realtime' ? Date.now() : Math.floor(Date.now() - arrivalWindowMs);
  log.info({ scenario: scenario.name, seed: options.seed, endpoint: options.endpoint, pace: options.pace, description: scenario.description }, 'simulating');
  const tty = process.stderr.isTTY;
  const summary = await runSimulation({
    config,
    endpoint: options.endpoint,
    startTimeMs,
    pace: options.pace,
    keepTruth: options.truth !== undefined || options.pace === 'fast',
    signal,
    onProgress: tty
      ? (p) => process.stderr.write(`\r  simulated ${(p.simulatedMs / 1000).toFixed(1)} s · spans emitted ${p.spansEmitted} · exported ${p.spansExported} · failed ${p.spansFailed}   `)
      : undefined,
  });
  if (tty) process.stderr.write('\n');
  if (options.truth) await writeFile(options.truth, formatTruth(summary.truth));
  const resolutions: Record<string, number> = {};
  for (const t of summary.truth) resolutions[t.resolution] = (resolutions[t.resolution] ?? 0) + 1;
  process.stdout.write(
    `${scenario.name} seed ${options.seed}: ${summary.truth.length > 0 ? `${summary.lifecycles} lifecycles, ` : ''}${summary.spansEmitted} spans emitted, ` +
      `${summary.spansExported} exported, ${summary.spansFailed} failed in ${summary.exportsFailed} failed exports; ` +
      `resolutions ${JSON.stringify(resolutions)}${options.truth ? `; truth written to ${options.truth}` : ''}\n`,
  );
  return summary;
}
