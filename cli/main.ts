import { Command, Option } from 'commander';
import { HoldscopeError } from '../common/index.ts';
import { SCENARIO_NAMES } from '../emitter/index.ts';
import { collectorCommand } from './collector.ts';
import { migrateCommand, pipelineCommand, serveCommand } from './pipeline.ts';
import { queryCommand } from './query.ts';
import { addStorageOptions } from './storage.ts';
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
  .description('Run the whole stack in one process: collector, pipeline, read API and simulated engines, on embedded ClickHouse')
  .option('--otlp-port <port>', 'OTLP/HTTP port', '4318')
  .option('--http-port <port>', 'HTTP port of the read API and pages', '8080')
  .option('--no-simulate', 'do not run simulated engines; only receive')
  .addOption(new Option('--scenario <name>', 'scenario of the simulated engines').choices(SCENARIO_NAMES).default('mixed'))
  .option('--seed <n>', 'seed of the simulated engines (default: a new one each run)')
  .option('--data <dir>', 'data directory (embedded ClickHouse lives in DIR/clickhouse)', '.data')
  .action(async (opts: Record<string, unknown>) => {
    await startCommand(opts);
  });

program
  .command('collector')
  .description('OTLP/HTTP trace receiver that produces PD spans to Kafka (needs KAFKA_BROKERS or --kafka-brokers)')
  .option('--port <port>', 'OTLP/HTTP port (HOLDSCOPE_OTLP_PORT; default 4318)')
  .option('--host <address>', 'listen address (default 0.0.0.0)')
  .option('--kafka-brokers <list>', 'Kafka bootstrap brokers host:port,... (KAFKA_BROKERS)')
  .option('--topic <name>', 'topic for PD spans (HOLDSCOPE_TOPIC; default pd-spans)')
  .option('--dead-letter-topic <name>', 'topic for rejected spans (default pd-spans-dead-letter)')
  .option('--topic-partitions <n>', 'partitions when creating the topic (default 12)')
  .option('--topic-retention-ms <ms>', 'retention.ms when creating the topics (default 7 days)')
  .option('--topic-replication-factor <n>', "replication factor when creating the topics (default -1: the broker's)")
  .option('--max-body-bytes <n>', 'largest body after decompression (default 4 MiB)')
  .option('--max-spans-per-request <n>', 'most spans in one request (default 50000)')
  .option('--max-attribute-length <n>', 'longest attribute value of a PD span or its resource: characters, bytes, or values nested ones counted (default 4096)')
  .option('--max-attributes <n>', 'most attributes on a PD span or its resource (default 128)')
  .option('--max-message-bytes <n>', 'largest Kafka record batch produced, so each message (default 1000000)')
  .option('--max-pending-spans <n>', 'spans waiting for Kafka before answering 429 (default 200000)')
  .option('--max-pending-bytes <n>', 'bytes of messages waiting for Kafka before answering 429 (default 64 MiB)')
  .option('--produce-timeout-ms <ms>', 'how long a request waits for Kafka before 503 (default 10000)')
  .option('--auth-token <token>', 'bearer token required on requests (HOLDSCOPE_COLLECTOR_TOKEN)')
  .action(async (opts: Record<string, unknown>) => {
    await collectorCommand(opts);
  });

addStorageOptions(
  program
    .command('pipeline')
    .description('Consume PD spans from Kafka into ClickHouse lifecycle records (needs KAFKA_BROKERS or --kafka-brokers)')
    .option('--kafka-brokers <list>', 'Kafka bootstrap brokers host:port,... (KAFKA_BROKERS)')
    .option('--topics <list>', 'topics to read (default pd-spans; add otlp_spans for the OpenTelemetry Collector Kafka exporter)')
    .option('--group-id <id>', 'consumer group (default holdscope-pipeline)')
    .option('--max-batch-rows <n>', 'rows per INSERT (default 50000)')
    .option('--linger-ms <ms>', 'how long rows wait for more before an INSERT (default 200)')
    .option('--refresh-interval-ms <ms>', 'least time between two refreshes of the stored records while rows keep coming; the window queries trail by up to this more (default 1000)')
    .option('--partitions-consumed-concurrently <n>', 'partitions processed at once (default 8)')
    .option('--max-bytes-per-partition <n>', 'bytes fetched per partition per request (default 1 MiB)')
    .option('--max-in-flight-bytes <n>', 'encoded rows handed to ClickHouse and not yet acknowledged before the consumer waits (default 24 MiB)')
    .option('--session-timeout-ms <ms>', 'Kafka consumer group session timeout (default 30000)')
    .option('--heartbeat-interval-ms <ms>', 'Kafka consumer heartbeat interval (default 3000)')
    .option('--fetch-max-wait-ms <ms>', 'longest a Kafka fetch waits for data; bounds freshness on quiet partitions (default 500)')
    .option('--rebalance-timeout-ms <ms>', 'how long the group waits for members to rejoin in a rebalance; bounds a SIGTERM during a join (default 20000)')
    .option('--shutdown-timeout-ms <ms>', 'after SIGTERM/SIGINT, exit with status 1 if stopping takes longer (default 30000)')
    .option('--metrics-port <port>', 'port of /metrics and /healthz', '9465'),
).action(async (opts: Record<string, unknown>) => {
  await pipelineCommand(opts);
});

addStorageOptions(program.command('migrate').description('Create or upgrade the ClickHouse schema (idempotent), then exit')).action(
  async (opts: Record<string, unknown>) => {
    await migrateCommand(opts);
  },
);

addStorageOptions(
  program.command('serve').description('Serve the read API over an existing database').option('--http-port <port>', 'HTTP port', '8080'),
).action(async (opts: Record<string, unknown>) => {
  await serveCommand(opts);
});

addStorageOptions(
  program
    .command('query')
    .argument('[name]', 'query name (see --list)')
    .description('Run a named postmortem or detection query (queries/sql) and print its rows')
    .option('--list', 'list the queries with their parameters')
    .option('--param <key=value>', 'a query parameter (repeatable)', (value: string, previous: string[] = []) => [...previous, value])
    .addOption(new Option('--format <format>', 'output format').choices(['table', 'json', 'csv']).default('table')),
).action(async (name: string | undefined, opts: Record<string, unknown>) => {
  await queryCommand(name, opts);
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
