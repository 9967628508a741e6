import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseError } from '@clickhouse/client';
import { classifyClickHouseError, clickHouseFailureKind, ConfigError, serverErrorOf } from '../../common/index.ts';

/** An error as @clickhouse/client makes it from a server's answer. */
const answer = (code: number, name: string) =>
  parseError(`Code: ${code}. DB::Exception: something about it. (${name}) (version 26.7.2.1 (official build))`);

describe('ClickHouse failures by code', () => {
  it('tells transient, setup and content failures apart by code, whatever the message says', () => {
    const cases: [number, string, string][] = [
      [202, 'TOO_MANY_SIMULTANEOUS_QUERIES', 'transient'],
      [241, 'MEMORY_LIMIT_EXCEEDED', 'transient'],
      [252, 'TOO_MANY_PARTS', 'transient'],
      // A Distributed INSERT cut by a dying replica gets 32 too, but so does a value too short to parse: the writer
      // asks a row twice before it takes it for refused (pipeline/writer.ts).
      [32, 'ATTEMPT_TO_READ_AFTER_EOF', 'content'],
      [60, 'UNKNOWN_TABLE', 'setup'],
      [516, 'AUTHENTICATION_FAILED', 'setup'],
      [243, 'NOT_ENOUGH_SPACE', 'setup'],
      [407, 'DECIMAL_OVERFLOW', 'content'],
      [27, 'CANNOT_PARSE_INPUT_ASSERTION_FAILED', 'content'],
      [469, 'VIOLATED_CONSTRAINT', 'content'],
    ];
    for (const [code, name, kind] of cases) {
      const error = answer(code, name);
      assert.equal(serverErrorOf(error)?.code, String(code), `${name} parsed`);
      assert.equal(clickHouseFailureKind(error), kind, name);
      const classified = classifyClickHouseError(error, 'inserting');
      assert.equal(classified.retriable, kind === 'transient', `${name} retriable`);
      // Classified (and wrapped again), the failure keeps its kind: the server's answer is found through the causes.
      assert.equal(clickHouseFailureKind(classified), kind, `${name} classified`);
      assert.equal(clickHouseFailureKind(new Error('wrapped', { cause: classified })), kind, `${name} wrapped`);
    }
  });

  it('takes a failure without a server answer for transient, and a permanent error of our own for content', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8123'), { code: 'ECONNREFUSED' });
    assert.equal(clickHouseFailureKind(refused), 'transient');
    assert.equal(classifyClickHouseError(refused, 'inserting').retriable, true);
    assert.equal(clickHouseFailureKind(new Error('Timeout error.')), 'transient');
    assert.equal(clickHouseFailureKind(new ConfigError('bad')), 'content');
  });
});
