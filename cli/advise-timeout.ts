import { createClickHouse, InputError, loadConfig } from '../common/index.ts';
import { clickHouseConnection, storageConfigSchema } from '../pipeline/index.ts';
import {
  adviceWindow,
  adviseHoldTimeouts,
  loadFlagThresholds,
  parseTarget,
  queryReadLimitsSchema,
  type AdviceReport,
  type HoldTimeoutAdvice,
} from '../queries/index.ts';
import { formatRows } from './query.ts';

const percent = (share: number | null | undefined) => (share === null || share === undefined ? '' : `${(100 * share).toFixed(1)}%`);
const num = (x: number | null) => (x === null ? '' : String(x));

/** One line per group: the advice beside today's timeout, and what it costs. */
function tableRow(g: HoldTimeoutAdvice): Record<string, unknown> {
  const a = g.advice;
  return {
    prefill_version: g.prefill_version,
    decode_version: g.decode_version,
    backend: g.backend,
    decode_engine: g.decode_engine,
    holds: g.holds,
    advised_ms: a.method === 'too-few' ? `too few holds: ${a.n}` : Math.ceil(a.timeoutMs),
    interval_ms: a.method === 'too-few' ? '' : `${Math.floor(a.lowerMs)}..${Math.ceil(a.upperMs)}`,
    method: a.method,
    today_ms:
      g.today.timeout_common_ms === g.today.timeout_max_ms
        ? g.today.timeout_common_ms
        : `${g.today.timeout_common_ms} (max ${g.today.timeout_max_ms})`,
    slot_s_per_abort: num(g.cost.slot_seconds_per_abort_at_advised),
    today_slot_s_per_abort: num(g.today.slot_seconds_per_abort),
    storm_peak_share: g.storm ? percent(g.storm.peak_share_at_advised) : 'no storm',
    today_storm_peak_share: g.storm ? percent(g.storm.peak_share_today) : '',
    without_evidence: g.without_evidence,
  };
}

/** The report as text: the table, then each group's notes. */
export function formatAdvice(report: AdviceReport): string {
  const head = `hold-timeout advice for ${report.from} .. ${report.to}, target P(write lands after release) < ${report.target}\n`;
  const notes = report.groups.flatMap((g) =>
    g.notes.map((n) => `  ${g.prefill_version} -> ${g.decode_engine} (${g.decode_version}, ${g.backend}): ${n}`),
  );
  if (report.groups.length === 0) return `${head}no holds started in the window\n`;
  return head + formatRows(report.groups.map(tableRow), 'table') + (notes.length > 0 ? `notes:\n${notes.join('\n')}\n` : '');
}

/** `holdscope advise-timeout [--from -6h] [--to now] [--cluster c] [--target 1e-4] [--format table|json]`. */
export async function adviseTimeoutCommand(flags: Record<string, unknown>): Promise<void> {
  const { from, to, cluster, target, format, ...storageFlags } = flags as {
    from?: string;
    to?: string;
    cluster?: string;
    target?: string;
    format?: string;
  } & Record<string, unknown>;
  if (!['table', 'json'].includes(format ?? 'table'))
    throw new InputError(`--format: expected table or json, got ${JSON.stringify(format)}`);
  const config = loadConfig(storageConfigSchema.extend(queryReadLimitsSchema.shape), storageFlags);
  const window = adviceWindow(from, to, config);
  const probability = parseTarget(target);
  const client = await createClickHouse(clickHouseConnection(config));
  try {
    const report = await adviseHoldTimeouts(
      client,
      config.database,
      { ...window, cluster: cluster ?? '' },
      { target: probability, thresholds: loadFlagThresholds(), limits: config },
    );
    process.stdout.write(format === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatAdvice(report));
  } finally {
    await client.close();
  }
}
