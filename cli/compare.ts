import { createClickHouse, InputError, loadConfig } from '../common/index.ts';
import { clickHouseConnection, storageConfigSchema } from '../pipeline/index.ts';
import {
  compareArms,
  loadFlagThresholds,
  parseCompareRequest,
  parseSelectorText,
  queryReadLimitsSchema,
  type ComparisonReport,
  type MetricComparison,
} from '../queries/index.ts';

/** `holdscope compare`'s storage and read limits: a postmortem's, like `holdscope query`. */
export const compareConfigSchema = storageConfigSchema.extend(queryReadLimitsSchema.shape);

interface CompareFlags {
  baseline?: string;
  candidate?: string;
  both?: string;
  rolloutAt?: string;
  window?: string;
  format?: string;
}

/** The flags as the flat pairs the one parser reads (queries/compare-selector.ts), as `/api/compare` gets them. */
export function comparePairs(flags: CompareFlags): Record<string, string> {
  const pairs: Record<string, string> = {};
  for (const arm of ['baseline', 'candidate', 'both'] as const) {
    const text = flags[arm];
    if (text === undefined) continue;
    for (const [key, value] of Object.entries(parseSelectorText(text, `--${arm}`))) pairs[`${arm}.${key}`] = value;
  }
  if (flags.rolloutAt !== undefined) pairs.rollout_at = flags.rolloutAt;
  if (flags.window !== undefined) pairs.window = flags.window;
  return pairs;
}

/**
 * A number in the metric's unit: shares as % (a difference in percentage points), times in ms, rates per 10,000 holds;
 * an unbounded side as ∞. `signed` for differences and their bounds.
 */
function shown(m: MetricComparison, x: number | null, signed = false): string {
  if (x === null) return '-';
  const sign = signed && x > 0 ? '+' : '';
  if (!Number.isFinite(x)) return `${x > 0 ? sign : '-'}∞`;
  return sign + (m.unit === 'share' ? (100 * x).toFixed(2) : m.unit === 'holds' ? String(x) : x.toFixed(2));
}

const unitText = (m: MetricComparison, difference: boolean) => (m.unit === 'share' ? (difference ? ' pp' : '%') : '');

function differenceText(m: MetricComparison): string {
  if (m.difference === null) return '-';
  const interval = m.interval ? ` [${shown(m, m.interval.lower, true)}, ${shown(m, m.interval.upper, true)}]` : '';
  return `${shown(m, m.difference, true)}${unitText(m, true)}${interval}`;
}

function verdictText(m: MetricComparison): string {
  if (m.verdict === 'no detectable difference')
    return `none (could detect ±${shown(m, m.minimumDetectableDifference ?? null)}${unitText(m, true)})`;
  return m.verdict ?? '';
}

/** Metrics as an aligned table, and one line per note naming the metrics it applies to. */
function metricTable(metrics: MetricComparison[], confidence: number): { table: string[]; notes: string[] } {
  const header = ['metric', 'baseline', 'candidate', `difference [${100 * confidence}% interval]`, 'method', 'verdict'];
  const rows = metrics.map((m) => [
    m.label,
    m.baseline === null ? '-' : shown(m, m.baseline) + unitText(m, false),
    m.candidate === null ? '-' : shown(m, m.candidate) + unitText(m, false),
    differenceText(m),
    m.method ?? '',
    verdictText(m),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] as number))
      .join('  ')
      .trimEnd();
  // One line per note: an arm without holds is one line, not eleven.
  const byNote = new Map<string, string[]>();
  for (const m of metrics) if (m.note) byNote.set(m.note, [...(byNote.get(m.note) ?? []), m.label]);
  const notes = [...byNote].map(([note, labels]) => `${labels.join(', ')}: ${note}`);
  return { table: [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)], notes };
}

/** The comparison as aligned tables (the holds pooled, then across runs when the arms are experiment arms). */
export function formatComparison(report: ComparisonReport): string {
  const pooled = metricTable(report.metrics, report.confidence);
  const runs = report.acrossRuns;
  const across = runs ? metricTable(runs.metrics, report.confidence) : undefined;
  const runList = (arm: 'baseline' | 'candidate') =>
    runs ? `${arm} runs: ${runs.runs[arm].map((r) => `${r.run} (${r.holds} holds)`).join(', ') || 'none'}` : '';
  return (
    [
      `baseline:  ${report.baseline.description}`,
      `candidate: ${report.candidate.description}`,
      '',
      ...pooled.table,
      '',
      `Quantiles from uniform samples of at most ${report.sampleSize.toLocaleString('en-US')} values per arm; difference = candidate - baseline;`,
      'shares in % (differences in percentage points), times in ms, rates per 10,000 holds.',
      ...pooled.notes,
      ...(across
        ? [
            '',
            'Across runs (each run one value; Welch interval over the runs):',
            runList('baseline'),
            runList('candidate'),
            '',
            ...across.table,
            ...across.notes,
          ]
        : []),
    ].join('\n') + '\n'
  );
}

/** `holdscope compare --baseline SELECTOR --candidate SELECTOR [--both SELECTOR] [--rollout-at TIME --window 1h]`. */
export async function compareCommand(flags: Record<string, unknown>): Promise<void> {
  const { baseline, candidate, both, rolloutAt, window, format, ...storageFlags } = flags as CompareFlags & Record<string, unknown>;
  if (!['table', 'json'].includes(format ?? 'table'))
    throw new InputError(`--format: expected table or json, got ${JSON.stringify(format)}`);
  const config = loadConfig(compareConfigSchema, storageFlags);
  const request = parseCompareRequest(comparePairs({ baseline, candidate, both, rolloutAt, window }), config);
  const client = await createClickHouse(clickHouseConnection(config));
  try {
    const report = await compareArms(client, config.database, request, { thresholds: loadFlagThresholds(), limits: config });
    process.stdout.write(format === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatComparison(report));
  } finally {
    await client.close();
  }
}
