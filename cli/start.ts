import { z } from 'zod';
import { parseConfig, port } from '../common/config.ts';
import { createLogger } from '../common/index.ts';
import { startOtlpReceiver } from '../collector/otlp-receiver.ts';
import { forEachSpan, validateSpan } from '../contract/index.ts';
import { SCENARIO_NAMES } from '../emitter/index.ts';
import { flagName, simulateCommand } from './simulate.ts';

const startSchema = z.object({
  otlpPort: port(),
  simulate: z.boolean(),
  scenario: z.enum(SCENARIO_NAMES),
});

/**
 * `holdscope start`. Until the Kafka collector and the ClickHouse pipeline land, this runs a built-in OTLP
 * receiver that validates every span against the contract and reports counts, with the simulator (paced to
 * the wall clock) as its engines.
 */
export async function startCommand(raw: Record<string, unknown>): Promise<void> {
  const options = parseConfig(startSchema, raw, flagName);
  const log = createLogger('start');
  const counts = { valid: 0, invalid: 0, notOurs: 0 };
  const byName: Record<string, number> = {};
  const receiver = await startOtlpReceiver({
    port: options.otlpPort,
    host: '0.0.0.0',
    onRequest: (request) =>
      forEachSpan(request, (span, resource) => {
        const result = validateSpan(span, resource);
        if (result.status === 'valid') {
          counts.valid++;
          byName[result.event.name] = (byName[result.event.name] ?? 0) + 1;
        } else if (result.status === 'invalid') {
          counts.invalid++;
          log.warn({ span: result.spanName, reason: result.reason }, 'span rejected');
        } else counts.notOurs++;
      }),
  });
  log.info(
    { otlp: `http://127.0.0.1:${receiver.port}/v1/traces` },
    'collector, pipeline and dashboards are not built yet: running a validating OTLP receiver; send OTLP/HTTP traces to it',
  );
  const report = setInterval(() => log.info({ ...counts, byName }, 'spans received'), 5000);
  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    if (options.simulate) {
      await simulateCommand(
        { scenario: options.scenario, seed: 1, endpoint: `http://127.0.0.1:${receiver.port}`, pace: 'realtime', duration: 24 * 3600 },
        controller.signal,
      );
    } else {
      await new Promise<void>((resolve) => controller.signal.addEventListener('abort', () => resolve()));
    }
  } finally {
    clearInterval(report);
    await receiver.close();
    log.info({ ...counts, byName }, 'stopped');
  }
}
