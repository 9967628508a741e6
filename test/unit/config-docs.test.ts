import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { collectorConfigSchema } from '../../collector/index.ts';
import { defaultOf, describeKeys } from '../../common/config.ts';

/** The rows of a markdown table whose first cell is a flag: flag -> [environment cell, default cell]. */
function flagTable(markdown: string): Map<string, [string, string]> {
  const rows = new Map<string, [string, string]>();
  for (const line of markdown.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const flag = /^`(--[a-z-]+)`$/.exec(cells[1] ?? '')?.[1];
    if (flag) rows.set(flag, [cells[2] ?? '', cells[3] ?? '']);
  }
  return rows;
}

describe('docs/collector.md against the collector schema', () => {
  // Keys an operator rarely sets, documented in the schema and `--help` only.
  const internal = new Set(['kafkaClientId', 'maxBatchSpans', 'lingerMs', 'maxInflightSends', 'shutdownTimeoutMs']);

  it('lists every key with its flag, its variable and its default, and no flag the schema lacks', () => {
    const table = flagTable(readFileSync(new URL('../../docs/collector.md', import.meta.url), 'utf8'));
    const keys = describeKeys(collectorConfigSchema);
    for (const { name, flag, schema, info } of keys) {
      if (internal.has(name)) continue;
      const row = table.get(flag);
      assert.ok(row, `${flag} is missing from the table`);
      assert.equal(row[0], info?.env ? `\`${info.env}\`` : '', `${flag}: environment`);
      const fallback = defaultOf(schema);
      const shown = Array.isArray(fallback) ? '' : String(fallback ?? '');
      if (shown !== '') assert.ok(row[1].startsWith(shown), `${flag}: the table says ${row[1]}, the schema ${shown}`);
    }
    for (const flag of table.keys())
      assert.ok(
        keys.some((k) => k.flag === flag),
        `${flag} is in the table but not in the schema`,
      );
  });
});
