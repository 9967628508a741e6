import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatStringListText, parseStringListText } from './list-text.ts';

test('parses ClickHouse Array(String) text: quotes doubled or escaped, backslash escapes, spaces between elements', () => {
  assert.deepEqual(parseStringListText("['a','b']"), ['a', 'b']);
  assert.deepEqual(parseStringListText(' [ ] '), []);
  assert.deepEqual(parseStringListText("[ 'it''s' , 'x\\'y' ]"), ["it's", "x'y"]);
  assert.deepEqual(parseStringListText("['back\\\\slash','tab\\there','new\\nline','[,]']"), [
    'back\\slash',
    'tab\there',
    'new\nline',
    '[,]',
  ]);
  assert.deepEqual(parseStringListText("['']"), ['']);
});

test('refuses what is not such a list', () => {
  for (const text of ['', 'a', '[a]', "['a'", "['a',]", "['a' 'b']", "['a']x", '["a"]', "['a\\", "['unterminated]", '[,]']) {
    assert.equal(parseStringListText(text), undefined, text);
  }
});

test('formats a list as text that parses back to the same strings', () => {
  const values = ["it's", 'back\\slash', "'; DROP TABLE spans; --", 'tab\there', '', '[a,b]', 'ünïcødé'];
  assert.equal(formatStringListText(['a', "b'c"]), "['a','b''c']");
  assert.deepEqual(parseStringListText(formatStringListText(values)), values);
  assert.deepEqual(parseStringListText(formatStringListText([])), []);
});
