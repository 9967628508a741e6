/**
 * The production cluster schema (ON CLUSTER, Replicated engines) cannot run here: chdb has no DDL queue and no Keeper.
 * test/integration/cluster-mode.test.ts runs the node-by-node schema on a 2 x 2 cluster; this renders both and checks
 * that they are the same statements, differing only in the ON CLUSTER clause and the Replicated engine names.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadMigrations, type SchemaOptions } from './migrate.ts';

const base: SchemaOptions = { database: 'holdscope', cluster: 'prod_cluster', retentionDays: 30 };
const onCluster = loadMigrations({ ...base, ddl: 'on-cluster' });
const nodeByNode = loadMigrations({ ...base, ddl: 'node-by-node' });
const single = loadMigrations({ database: 'holdscope', retentionDays: 30 });

/** Each statement's SQL without its comments (which quote the template's variables), by migration. */
const statements = (migrations: typeof onCluster) =>
  migrations.flatMap((m) => m.statements.map((text) => ({ name: m.name, text: code(text) })));
const code = (statement: string) => statement.replace(/^--.*$/gm, '').trim();
const spaced = (sql: string) => sql.replace(/\s+/g, ' ');
const isData = (statement: string) => /^INSERT\b/.test(code(statement));

/** The Distributed tables a rendering creates: name -> what they front and their sharding key. */
function distributedTables(migrations: typeof onCluster): Map<string, string> {
  const out = new Map<string, string>();
  for (const { text } of statements(migrations)) {
    const match = /CREATE TABLE IF NOT EXISTS holdscope\.(\w+)[^\n]*\nENGINE = Distributed\((.*)\)$/m.exec(code(text));
    if (match) out.set(match[1]!, match[2]!);
  }
  return out;
}

describe('the cluster schema, rendered ON CLUSTER with Replicated engines and node by node', () => {
  it('has the same migrations and statements in both, differing only in ON CLUSTER and the Replicated engines', () => {
    assert.deepEqual(
      onCluster.map((m) => [m.version, m.name, m.statements.length]),
      nodeByNode.map((m) => [m.version, m.name, m.statements.length]),
    );
    const production = statements(onCluster);
    const executed = statements(nodeByNode);
    for (const [i, { name, text }] of production.entries()) {
      const plain = text.replace(/ ON CLUSTER prod_cluster\b/g, '').replace(/\bReplicated(\w*MergeTree)\b/g, '$1');
      assert.equal(spaced(plain), spaced(executed[i]?.text ?? ''), `${name}: statement ${i + 1}`);
    }
  });

  it('sends every DDL statement ON CLUSTER and on Replicated engines, and moves data once, without it', () => {
    let engines = 0;
    for (const { name, text } of statements(onCluster)) {
      const sql = code(text);
      if (isData(sql)) {
        assert.doesNotMatch(sql, /ON CLUSTER/, `${name}: an INSERT runs once, through the Distributed tables`);
        assert.match(sql, /^INSERT INTO holdscope\.\w+ *\n/, `${name}: an INSERT writes a plain (Distributed) name`);
        continue;
      }
      assert.match(sql, /^(CREATE|ALTER|TRUNCATE)\b.* ON CLUSTER prod_cluster\b/m, `${name}: ${sql.slice(0, 80)}`);
      for (const engine of sql.matchAll(/ENGINE = (\w+)/g)) {
        engines++;
        assert.match(engine[1]!, /^(Replicated\w*MergeTree|Distributed)$/, `${name}: engine ${engine[1]}`);
      }
    }
    assert.ok(engines >= 18, `${engines} engines`);
    for (const { name, text } of statements(nodeByNode)) {
      assert.doesNotMatch(text, /ON CLUSTER|Replicated/, name);
    }
  });

  it('fronts each _local table with a Distributed table sharded alike in both: lifecycles by (cluster, request id)', () => {
    const expected = new Map(
      [
        'spans',
        'lifecycle_states',
        'lifecycle_records',
        'lifecycle_flags',
        'lifecycle_holds',
        'late_write_pages',
        'page_allocations',
        'span_dead_letters',
        'lifecycle_arms',
        'lifecycles',
        'lifecycle_record_rows',
      ].map((t) => [t, `prod_cluster, holdscope, ${t}_local, cityHash64(cluster, request_id)`]),
    );
    expected.set('hold_minutes', 'prod_cluster, holdscope, hold_minutes_local, cityHash64(cluster, minute)');
    assert.deepEqual(distributedTables(onCluster), expected);
    assert.deepEqual(distributedTables(nodeByNode), expected);
    assert.deepEqual(distributedTables(single), new Map());
    // Materialized views read and write the _local tables, so each node fires them on the rows it stores.
    let views = 0;
    for (const { name, text } of statements(nodeByNode)) {
      const view = /CREATE MATERIALIZED VIEW IF NOT EXISTS holdscope\.(\w+)\s+TO holdscope\.(\w+)/.exec(code(text));
      if (view) {
        views++;
        assert.match(view[1]!, /_mv_local$/, name);
        assert.match(view[2]!, /_local$/, name);
        assert.doesNotMatch(
          code(text)
            .split(/\bAS\b/)
            .slice(1)
            .join('AS'),
          /FROM holdscope\.(?!\w+_local\b)\w+(?!\w)/,
          `${name}: reads _local`,
        );
      }
    }
    assert.equal(views, 6, 'materialized views');
    // Plain views merge a lifecycle's states on its own shard: a view over a Distributed table would not send a key
    // filter on to the shards (ClickHouse's analyzer), and each would return every state it holds.
    let plainViews = 0;
    for (const { name, text } of statements(nodeByNode)) {
      const view = /CREATE (?:OR REPLACE )?VIEW (?:IF NOT EXISTS )?holdscope\.(\w+)/.exec(code(text));
      if (!view) continue;
      plainViews++;
      assert.match(view[1]!, /_local$/, name);
      for (const [, table] of code(text).matchAll(/FROM holdscope\.(\w+)/g)) assert.match(table!, /_local$/, `${name}: reads ${table}`);
    }
    assert.equal(plainViews, 3, 'plain views (lifecycles, and lifecycle_record_rows twice)');
  });

  it('renders no _local table or Distributed table on one node', () => {
    for (const { name, text } of statements(single)) assert.doesNotMatch(text, /_local\b|Distributed|ON CLUSTER|Replicated/, name);
  });
});
