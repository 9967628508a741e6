import { Command, Option } from 'commander';
import { collectorConfigSchema } from '../collector/index.ts';
import { HoldscopeError } from '../common/index.ts';
import { rulesConfigSchema } from '../dashboards/index.ts';
import { storageConfigSchema } from '../pipeline/index.ts';
import { collectorCommand } from './collector.ts';
import { compareCommand, compareConfigSchema } from './compare.ts';
import { adviseTimeoutCommand } from './advise-timeout.ts';
import { addConfigOptions } from './options.ts';
import { migrateCommand, pipelineCommand, pipelineCommandSchema, serveCommand, serveConfigSchema } from './pipeline.ts';
import { queryCommand } from './query.ts';
import { rulesCommand } from './rules.ts';
import { simulateCommand, simulateSchema } from './simulate.ts';
import { startCommand, startConfigSchema } from './start.ts';

const program = new Command('holdscope')
  .description('Observability for KV-page holds in prefill/decode disaggregated LLM serving')
  .showHelpAfterError();

program.command('simulate').description('Run the seeded PD cluster simulator and export its spans over OTLP/HTTP (protobuf)');
addConfigOptions(program.commands.at(-1) as Command, simulateSchema).action(async (opts: Record<string, unknown>) => {
  await simulateCommand(opts);
});

addConfigOptions(
  program
    .command('start')
    .description('Run the whole stack in one process: collector, pipeline, read API and simulated engines, on embedded ClickHouse'),
  startConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await startCommand(opts);
});

addConfigOptions(
  program
    .command('collector')
    .description('OTLP/HTTP trace receiver that produces PD spans to Kafka (needs KAFKA_BROKERS or --kafka-brokers)'),
  collectorConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await collectorCommand(opts);
});

addConfigOptions(
  program
    .command('pipeline')
    .description('Consume PD spans from Kafka into ClickHouse lifecycle records (needs KAFKA_BROKERS or --kafka-brokers)'),
  pipelineCommandSchema,
).action(async (opts: Record<string, unknown>) => {
  await pipelineCommand(opts);
});

addConfigOptions(
  program.command('migrate').description('Create or upgrade the ClickHouse schema (idempotent), then exit'),
  storageConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await migrateCommand(opts);
});

addConfigOptions(
  program.command('serve').description('Serve the pages, read API and /metrics over an existing database'),
  serveConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await serveCommand(opts);
});

addConfigOptions(
  program
    .command('query')
    .argument('[name]', 'query name (see --list)')
    .description('Run a named postmortem or detection query (queries/sql) and print its rows')
    .option('--list', 'list the queries with their parameters')
    .option('--param <key=value>', 'a query parameter (repeatable)', (value: string, previous: string[] = []) => [...previous, value])
    .addOption(new Option('--format <format>', 'output format').choices(['table', 'json', 'csv']).default('table')),
  storageConfigSchema,
).action(async (name: string | undefined, opts: Record<string, unknown>) => {
  await queryCommand(name, opts);
});

addConfigOptions(
  program
    .command('compare')
    .description(
      'Compare two arms of held records (a rollout before/after, or version A against B) per metric, with 95% intervals and verdicts',
    )
    .option(
      '--baseline <selector>',
      'the baseline arm: "key=value ..." of cluster, decode_engine, decode_version, prefill_engine, prefill_version, backend, arm, run, from, to',
    )
    .option('--candidate <selector>', 'the candidate arm, as --baseline')
    .option('--both <selector>', 'keys both arms share (an arm\'s own key overrides), e.g. "cluster=prod from=-1h"')
    .option('--rollout-at <time>', 'baseline = the --window before this time, candidate = the --window after it (ISO 8601 or -2h)')
    .option('--window <duration>', 'with --rollout-at: each arm this long (e.g. 30m, 1h; default 1h)')
    .addOption(new Option('--format <format>', 'output format').choices(['table', 'json']).default('table')),
  compareConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await compareCommand(opts);
});

addConfigOptions(
  program
    .command('rules')
    .description(
      "Print the Prometheus alerting rules with the flags' thresholds (HOLDSCOPE_FLAG_THRESHOLDS), the page's URL and the scrape jobs",
    ),
  rulesConfigSchema,
).action((opts: Record<string, unknown>) => {
  rulesCommand(opts);
});

addConfigOptions(
  program
    .command('advise-timeout')
    .description(
      'Advise a hold timeout per pairing and decode engine from the measured transfer tails, with its interval and its cost in KV',
    )
    .option('--from <time>', 'holds starting at or after this time: ISO 8601 or relative to now (-6h, -30m)', '-6h')
    .option('--to <time>', 'holds starting before this time: ISO 8601, now or relative to now', 'now')
    .option('--cluster <name>', 'one cluster (default: all)')
    .option('--target <probability>', 'largest acceptable probability that a write lands after release, in (0, 0.5)', '1e-4')
    .addOption(new Option('--format <format>', 'output format').choices(['table', 'json']).default('table')),
  storageConfigSchema,
).action(async (opts: Record<string, unknown>) => {
  await adviseTimeoutCommand(opts);
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
