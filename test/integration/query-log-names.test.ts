/**
 * The named reads say who they are in a ClickHouse server's system.query_log (log_comment `holdscope <name>`): what
 * an operator looks at to tell which of holdscope's reads costs what, and what `npm run bench -- --clickhouse-cpu`
 * splits ClickHouse's CPU by.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { migrate } from '../../pipeline/index.ts';
import { runQuery } from '../../queries/index.ts';
import { writeQueryLogConfig } from '../support/clickhouse-logs.ts';
import { clickhouseClient, startClickHouseServer } from '../support/clickhouse-server.ts';
import { randomDatabase } from '../support/stack.ts';

test('a named read carries its name to system.query_log', async () => {
  const server = await startClickHouseServer({ configFile: writeQueryLogConfig() });
  const client = clickhouseClient(server.url);
  try {
    const database = randomDatabase('query_log_names');
    await migrate(client, { database, retentionDays: 30 });
    await runQuery(client, database, 'lifecycle_progress_by_requests', { request_ids: "['nobody']" });
    await client.command({ query: 'SYSTEM FLUSH LOGS' });
    const result = await client.query({
      query: `SELECT DISTINCT log_comment FROM system.query_log
              WHERE type = 'QueryFinish' AND current_database = 'default' AND position(query, {db:String}) > 0 AND log_comment != ''`,
      query_params: { db: database },
      format: 'JSONEachRow',
    });
    const comments = (await result.json<{ log_comment: string }>()).map((r) => r.log_comment);
    assert.deepEqual(comments, ['holdscope lifecycle_progress_by_requests']);
  } finally {
    await client.close();
    await server.stop();
  }
});
