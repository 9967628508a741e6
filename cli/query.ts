import { createClickHouse } from '../common/index.ts';
import { InputError } from '../common/index.ts';
import { loadConfig } from '../common/index.ts';
import { clickHouseConnection, storageConfigSchema } from '../pipeline/index.ts';
import { listQueries, queryReadLimitsSchema, runQuery } from '../queries/index.ts';

function cell(value: unknown): string {
  if (value === null || value === undefined) return '';
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

function csvCell(value: unknown): string {
  const text = cell(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** Rows as an aligned text table, CSV, or JSON lines. */
export function formatRows(rows: Record<string, unknown>[], format: string): string {
  if (format === 'json') return rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : '');
  const columns = rows.length > 0 ? Object.keys(rows[0] as object) : [];
  if (format === 'csv') return [columns.join(','), ...rows.map((r) => columns.map((c) => csvCell(r[c])).join(','))].join('\n') + '\n';
  // Control characters from span data would move the terminal's cursor: show them escaped.
  const safe = (v: unknown) =>
    [...cell(v)]
      .map((c) => (c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f ? `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}` : c))
      .join('');
  const widths = columns.map((c) => Math.min(60, Math.max(c.length, ...rows.map((r) => safe(r[c]).length))));
  const line = (values: string[]) =>
    values.map((v, i) => (v.length > 60 ? v.slice(0, 59) + '…' : v).padEnd(widths[i] as number)).join('  ');
  return (
    [line(columns), line(widths.map((w) => '-'.repeat(w))), ...rows.map((r) => line(columns.map((c) => safe(r[c]))))].join('\n') +
    `\n(${rows.length} rows)\n`
  );
}

/** `holdscope query NAME --param k=v ... --format table|json|csv`, or `--list`. */
export async function queryCommand(name: string | undefined, flags: Record<string, unknown>): Promise<void> {
  const { param, format, list, ...storageFlags } = flags as { param?: string[]; format?: string; list?: boolean } & Record<string, unknown>;
  if (list || !name) {
    for (const q of listQueries().values()) {
      process.stdout.write(`${q.name}\n  ${q.purpose}\n`);
      for (const p of q.params)
        process.stdout.write(
          `  --param ${p.name}=<${p.type}>${p.defaultValue !== undefined ? ` (default ${JSON.stringify(p.defaultValue)})` : ''}  ${p.description}\n`,
        );
    }
    return;
  }
  const params: Record<string, string> = {};
  for (const pair of param ?? []) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new InputError(`--param: expected key=value, got ${JSON.stringify(pair)}`);
    params[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  if (!['table', 'json', 'csv'].includes(format ?? 'table'))
    throw new InputError(`--format: expected table, json or csv, got ${JSON.stringify(format)}`);
  // Bounded like every read, more widely than a page's (queryReadLimitsSchema).
  const config = loadConfig(storageConfigSchema.extend(queryReadLimitsSchema.shape), storageFlags);
  const client = await createClickHouse(clickHouseConnection(config));
  try {
    const rows = await runQuery(client, config.database, name, params, { limits: config });
    process.stdout.write(formatRows(rows, format ?? 'table'));
  } finally {
    await client.close();
  }
}
