import { Command, Option } from 'commander';
import { HoldscopeError } from '../common/index.ts';
import { SCENARIO_NAMES } from '../emitter/index.ts';
import { simulateCommand } from './simulate.ts';
import { startCommand } from './start.ts';

const program = new Command('holdscope')
  .description('Observability for KV-page holds in prefill/decode disaggregated LLM serving')
  .showHelpAfterError();

program
  .command('simulate')
  .description('Run the seeded PD cluster simulator and export its spans over OTLP/HTTP (protobuf)')
  .addOption(new Option('--scenario <name>', 'named scenario').choices(SCENARIO_NAMES).default('steady'))
  .option('--seed <n>', 'random seed: the same seed gives the same truth file', '1')
  .option('--rate <n>', 'arrival rate in requests/s (default: the scenario\'s)')
  .option('--requests <n>', 'number of fresh requests (default: the scenario\'s)')
  .option('--duration <seconds>', 'simulated seconds of arrivals (default: the scenario\'s)')
  .option('--endpoint <url>', 'OTLP/HTTP endpoint base URL', 'http://127.0.0.1:4318')
  .option('--truth <file>', 'write the ground truth, one JSON line per request generation')
  .option('--start-time <iso>', 'wall-clock time of simulated time zero (default: so arrivals end now)')
  .addOption(new Option('--pace <mode>', 'fast: as fast as the endpoint accepts; realtime: follow the wall clock').choices(['fast', 'realtime']).default('fast'))
  .option('--cluster <name>', 'pd.cluster of the simulated engines', undefined)
  .action(async (opts: Record<string, unknown>) => {
    await simulateCommand(opts);
  });

program
  .command('start')
  .description('Run holdscope on one machine with simulated engines (today: a validating OTLP receiver)')
  .option('--otlp-port <port>', 'OTLP/HTTP port', '4318')
  .option('--no-simulate', 'do not run simulated engines; only receive')
  .addOption(new Option('--scenario <name>', 'scenario of the simulated engines').choices(SCENARIO_NAMES).default('mixed'))
  .action(async (opts: Record<string, unknown>) => {
    await startCommand(opts);
  });

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof HoldscopeError && !error.retriable) {
    process.stderr.write(`holdscope: ${error.message}\n`);
    process.exitCode = 2;
  } else {
    throw error;
  }
}
