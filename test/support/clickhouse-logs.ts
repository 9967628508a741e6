/**
 * A ClickHouse config file that keeps `system.query_log`, `system.query_views_log` and `system.part_log`, flushed
 * every second, for a chdb server started with `startClickHouseServer({ configFile })`: what a statement, a
 * materialized view or a merge cost (its ProfileEvents), and under which name (log_comment). chdb's server keeps none
 * of them without it.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function writeQueryLogConfig(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'holdscope-clickhouse-logs-')), 'logs.xml');
  const log = (table: string) =>
    `<${table}><database>system</database><table>${table}</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></${table}>`;
  writeFileSync(file, `<clickhouse>${log('query_log')}${log('query_views_log')}${log('part_log')}</clickhouse>\n`);
  return file;
}
