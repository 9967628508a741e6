import { Command, Option } from 'commander';
import { collectorConfigSchema } from '../collector/index.ts';
import { HoldscopeError } from '../common/index.ts';
import { rulesConfigSchema } from '../dashboards/index.ts';
import { storageConfigSchema } from '../pipeline/index.ts';
import { collectorCommand } from './collector.ts';
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
    .command('rules')
    .description(
      "Print the Prometheus alerting rules with the flags' thresholds (HOLDSCOPE_FLAG_THRESHOLDS), the page's URL and the scrape jobs",
    ),
  rulesConfigSchema,
).action((opts: Record<string, unknown>) => {
  rulesCommand(opts);
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
