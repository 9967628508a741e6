import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { collectorConfigSchema } from '../../collector/index.ts';
import { defaultOf, describeKeys } from '../../common/config.ts';
import { externalUrl, violationAlertsConfigSchema } from '../../dashboards/index.ts';

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

/** Every key of `schema` but `internal` has its row, with its variable and its default; the table has no other flag. */
function assertTableMatches(table: Map<string, [string, string]>, schema: z.ZodObject, internal: ReadonlySet<string> = new Set()): void {
  const keys = describeKeys(schema);
  for (const { name, flag, schema: field, info } of keys) {
    if (internal.has(name)) continue;
    const row = table.get(flag);
    assert.ok(row, `${flag} is missing from the table`);
    assert.equal(row[0], info?.env ? `\`${info.env}\`` : '', `${flag}: environment`);
    const fallback = defaultOf(field);
    const shown = Array.isArray(fallback) ? '' : String(fallback ?? '');
    if (shown !== '') assert.ok(row[1].replaceAll('`', '').startsWith(shown), `${flag}: the table says ${row[1]}, the schema ${shown}`);
  }
  for (const flag of table.keys())
    assert.ok(
      keys.some((k) => k.flag === flag),
      `${flag} is in the table but not in the schema`,
    );
}

const doc = (name: string) => readFileSync(new URL(`../../docs/${name}`, import.meta.url), 'utf8');

describe("the docs' flag tables against the schemas", () => {
  it('docs/collector.md: every collector key with its flag, its variable and its default', () => {
    // Keys an operator rarely sets, documented in the schema and `--help` only.
    const internal = new Set(['kafkaClientId', 'maxBatchSpans', 'lingerMs', 'maxInflightSends', 'shutdownTimeoutMs']);
    assertTableMatches(flagTable(doc('collector.md')), collectorConfigSchema, internal);
  });

  it('docs/operations.md: every key of the violation push, and the external URL its links use', () => {
    const section = doc('operations.md').split('## Violation alerts to Alertmanager')[1]?.split('\n## ')[0] ?? '';
    assertTableMatches(flagTable(section), violationAlertsConfigSchema.extend({ externalUrl: externalUrl() }));
  });
});
