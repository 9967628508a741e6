import { Option, type Command } from 'commander';

/** The ClickHouse flags every command that stores or reads lifecycles takes. */
export function addStorageOptions(command: Command): Command {
  return command
    .option('--clickhouse-url <url>', 'ClickHouse HTTP URL (CLICKHOUSE_URL); without it, embedded ClickHouse under --data')
    .option('--clickhouse-user <user>', 'ClickHouse user (CLICKHOUSE_USER; default "default")')
    .addOption(new Option('--clickhouse-password <password>', 'ClickHouse password (CLICKHOUSE_PASSWORD)').hideHelp())
    .option('--database <name>', 'database (CLICKHOUSE_DATABASE; default holdscope)')
    .option('--data <dir>', 'embedded ClickHouse data directory (default .data/clickhouse)')
    .option('--clickhouse-cluster <name>', 'ClickHouse cluster: ON CLUSTER, Replicated and Distributed tables (CLICKHOUSE_CLUSTER)')
    .option('--retention-days <n>', 'days spans and lifecycles are kept (default 30)');
}
