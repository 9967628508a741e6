import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatRows } from '../../cli/query.ts';
import { bindParams, getQuery, listQueries, parseQueryFile } from '../../queries/index.ts';

describe('named queries', () => {
  it('every .sql file has a header naming its purpose and declaring every parameter it uses', () => {
    const names = [...listQueries().keys()];
    for (const expected of [
      'lifecycles_by_request',
      'flags_lifecycle',
      'late_write_victims',
      'hold_resolution_groups',
      'transfer_tails',
      'kv_pinned',
      'request_timeline',
      'resolution_mix',
      'longest_holds',
      'stale_acks_by_engine',
    ]) {
      assert.ok(names.includes(expected), expected);
    }
    for (const q of listQueries().values()) assert.ok(q.purpose.length > 20 && q.columns.length > 0, q.name);
  });

  it('refuses a query file that declares a parameter the runner or the read API owns', () => {
    const file = (param: string) =>
      `-- name: q\n-- purpose: a query to test its header\n-- param ${param} UInt32 = 1: a value\nSELECT {${param}:UInt32}\n`;
    assert.equal(parseQueryFile(file('rows_wanted'), 'q.sql').params[0]?.name, 'rows_wanted');
    for (const reserved of ['db', 'max_rows', 'holdscope_row_cap'])
      assert.throws(() => parseQueryFile(file(reserved), 'q.sql'), new RegExp(`q.sql: parameter ${reserved} is reserved`));
  });

  it("refuses a query name that is not letters, digits and underscores: it goes into each read's log_comment as it is", () => {
    const file = (name: string) => `-- name: ${name}\n-- purpose: a query to test its header\nSELECT 1\n`;
    assert.equal(parseQueryFile(file('rows_2'), 'q.sql').name, 'rows_2');
    for (const name of ["q' x", 'two words', 'q-1'])
      assert.throws(() => parseQueryFile(file(name), 'q.sql'), /q\.sql: a query's name is letters, digits and underscores/);
  });

  it('refuses a composite parameter type other than Array(String), which text could not reach a server as', () => {
    const file = (type: string) =>
      `-- name: q\n-- purpose: a query to test its header\n-- param ids ${type}: values\nSELECT {ids:${type}}\n`;
    assert.equal(parseQueryFile(file('Array(String)'), 'q.sql').params[0]?.type, 'Array(String)');
    for (const type of ['Array(UInt32)', 'Tuple(String, String)', 'Map(String, String)']) {
      assert.throws(
        () => parseQueryFile(file(type), 'q.sql'),
        new RegExp(`q.sql: parameter ids has type ${type.replace(/[()]/g, '\\$&')}; of the composite types only Array\\(String\\)`),
      );
    }
  });

  it('refuses unknown names, unknown parameters, missing and malformed values with the reason', () => {
    assert.throws(() => getQuery('drop_everything'), /unknown query "drop_everything"/);
    const q = getQuery('longest_holds');
    assert.throws(() => bindParams(q, { from: '2026-01-01T00:00:00Z' }), /needs parameter to/);
    assert.throws(() => bindParams(q, { from: '2026-01-01T00:00:00Z', to: 'yesterday' }), /to: expected an ISO 8601 time/);
    assert.throws(
      () => bindParams(q, { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z', limit: '1; DROP' }),
      /limit: expected an integer/,
    );
    assert.throws(() => bindParams(q, { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z', bogus: '1' }), /no parameter "bogus"/);
    assert.deepEqual(bindParams(q, { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00.5Z' }), {
      from: '2026-01-01 00:00:00.000',
      to: '2026-01-02 00:00:00.500',
      cluster: '',
      limit: '20',
    });
  });

  it('takes a list of strings as a list or as text, and a list for nothing else', () => {
    const byIds = getQuery('lifecycles_by_requests');
    assert.deepEqual(bindParams(byIds, { request_ids: ['a', "b'c"] }), { request_ids: ['a', "b'c"], cluster: '' });
    assert.deepEqual(bindParams(byIds, { request_ids: "['a','b''c']" }), { request_ids: ['a', "b'c"], cluster: '' });
    assert.throws(() => bindParams(byIds, { request_ids: 'a' }), /request_ids: expected a list of strings/);
    assert.throws(() => bindParams(byIds, { request_ids: ['a'], cluster: ['x'] }), /cluster: expected one value \(String\), got a list/);
  });

  it('prints tables with terminal control characters escaped, and CSV quoted', () => {
    const rows = [{ request_id: 'a\u001b[2Jb', pages: [1, 2] }];
    const table = formatRows(rows, 'table');
    assert.ok(!table.includes('\u001b'));
    assert.match(table, /a\\x1b\[2Jb/);
    assert.equal(formatRows([{ a: 'x,"y"' }], 'csv'), 'a\n"x,""y"""\n');
  });
});

describe('flag thresholds from HOLDSCOPE_FLAG_THRESHOLDS', () => {
  it('takes documented keys, and names a bad key or value', async () => {
    const { loadFlagThresholds } = await import('../../queries/index.ts');
    assert.equal(loadFlagThresholds({}).timeoutHeavyShare, 0.05);
    assert.equal(loadFlagThresholds({ HOLDSCOPE_FLAG_THRESHOLDS: '{"timeoutHeavyShare":0.1}' }).timeoutHeavyShare, 0.1);
    assert.throws(() => loadFlagThresholds({ HOLDSCOPE_FLAG_THRESHOLDS: '{"timeoutHeavy":0.1}' }), /unknown key\(s\) timeoutHeavy/);
    assert.throws(
      () => loadFlagThresholds({ HOLDSCOPE_FLAG_THRESHOLDS: '{"timeoutHeavyShare":2}' }),
      /HOLDSCOPE_FLAG_THRESHOLDS\.timeoutHeavyShare/,
    );
    assert.throws(() => loadFlagThresholds({ HOLDSCOPE_FLAG_THRESHOLDS: 'nope' }), /expected a JSON object/);
  });
});
