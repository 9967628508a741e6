import { writeFile } from 'node:fs/promises';
import { z } from 'zod';
import { key, loadConfig, nonNegativeInt, positiveNumber } from '../common/config.ts';
import { createLogger } from '../common/index.ts';
import { buildScenario, formatTruth, runSimulation, SCENARIO_NAMES, type SimulationSummary } from '../emitter/index.ts';

export const simulateSchema = z.object({
  scenario: key(z.enum(SCENARIO_NAMES).default('steady'), { help: 'named scenario', placeholder: 'name' }),
  /** The same seed gives the same spans and truth, byte for byte. */
  seed: key(nonNegativeInt().default(1), { help: 'random seed: the same seed gives the same truth file', placeholder: 'n' }),
  rate: key(positiveNumber('a request rate > 0 (requests/s)').optional(), {
    help: "arrival rate in requests/s (default: the scenario's)",
    placeholder: 'n',
  }),
  requests: key(nonNegativeInt().optional(), { help: "number of fresh requests (default: the scenario's)", placeholder: 'n' }),
  duration: key(positiveNumber('a duration > 0 (seconds)').optional(), {
    help: "simulated seconds of arrivals (default: the scenario's)",
    placeholder: 'seconds',
  }),
  endpoint: key(z.url({ error: 'expected an http(s) URL' }).default('http://127.0.0.1:4318'), {
    help: 'OTLP/HTTP endpoint base URL',
    placeholder: 'url',
  }),
  /** The collector's own variable: a sender and the collector it sends to are configured alike. */
  token: key(z.string().min(1).optional(), {
    help: 'bearer token sent with every export',
    env: 'HOLDSCOPE_COLLECTOR_TOKEN',
    placeholder: 'token',
    secret: true,
  }),
  truth: key(z.string().min(1).optional(), { help: 'write the ground truth, one JSON line per request generation', placeholder: 'file' }),
  startTime: key(z.iso.datetime({ error: 'expected an ISO 8601 date-time such as 2026-01-31T12:00:00Z' }).optional(), {
    help: 'wall-clock time of simulated time zero (default: so arrivals end now)',
    placeholder: 'iso',
  }),
  /** fast: as fast as the endpoint accepts (tests, backfills); realtime: follow the wall clock (live dashboards). */
  pace: key(z.enum(['fast', 'realtime']).default('fast'), {
    help: 'fast: as fast as the endpoint accepts; realtime: follow the wall clock',
    placeholder: 'mode',
  }),
  cluster: key(z.string().min(1).max(200).optional(), { help: 'pd.cluster of the simulated engines', placeholder: 'name' }),
  /** An experiment's runs are simulated one per command (a seed each), labelled as real engines would label them. */
  experimentArm: key(z.string().min(1).max(1024).optional(), {
    help: 'pd.experiment.arm of every simulated engine (default: none)',
    placeholder: 'arm',
  }),
  experimentRun: key(z.string().min(1).max(1024).optional(), {
    help: 'pd.experiment.run of every simulated engine (default: none)',
    placeholder: 'run',
  }),
});
export type SimulateOptions = z.output<typeof simulateSchema>;

/** Runs one simulation as the CLI's `simulate` asks, printing progress on a TTY and a summary at the end. */
export async function simulateCommand(raw: Record<string, unknown>, signal?: AbortSignal): Promise<SimulationSummary> {
  const options = loadConfig(simulateSchema, raw);
  const log = createLogger('simulate');
  const scenario = buildScenario(options.scenario, options.seed);
  const config = scenario.config;
  if (options.rate !== undefined) config.rate = options.rate;
  if (options.requests !== undefined) config.requests = options.requests;
  if (options.duration !== undefined) config.durationMs = options.duration * 1000;
  if (options.cluster !== undefined) config.cluster = options.cluster;
  if (options.experimentArm !== undefined || options.experimentRun !== undefined) {
    config.experiment = { arm: options.experimentArm ?? '', run: options.experimentRun ?? '' };
  }
  if (options.duration !== undefined && options.requests === undefined) config.requests = Number.MAX_SAFE_INTEGER;
  // In fast mode the run's arrivals end about now, so "recent" dashboards and time windows show it.
  const arrivalWindowMs = Math.min(config.durationMs, (config.requests / config.rate) * 1000);
  const startTimeMs = options.startTime
    ? Date.parse(options.startTime)
    : options.pace === 'realtime'
      ? Date.now()
      : Math.floor(Date.now() - arrivalWindowMs);
  log.info(
    { scenario: scenario.name, seed: options.seed, endpoint: options.endpoint, pace: options.pace, description: scenario.description },
    'simulating',
  );
  const tty = process.stderr.isTTY;
  const summary = await runSimulation({
    config,
    endpoint: options.endpoint,
    headers: options.token ? { authorization: `Bearer ${options.token}` } : undefined,
    startTimeMs,
    pace: options.pace,
    keepTruth: options.truth !== undefined || options.pace === 'fast',
    signal,
    onProgress: tty
      ? (p) =>
          process.stderr.write(
            `\r  simulated ${(p.simulatedMs / 1000).toFixed(1)} s · spans emitted ${p.spansEmitted} · exported ${p.spansExported} · failed ${p.spansFailed}   `,
          )
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
