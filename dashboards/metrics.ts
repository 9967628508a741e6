import { Registry } from 'prom-client';
import { ConfigError, type ClickHouseClient, type Logger } from '../common/index.ts';
import {
  computeFlags,
  DEFAULT_READ_LIMITS,
  describeDuration,
  flagThresholdsSchema,
  runQuery,
  stormReadParams,
  type FlagThresholds,
  type PinnedRow,
  type ReadLimits,
  type TailRow,
} from '../queries/index.ts';
import { applyRound, type OpenRow, type RefreshRound, type ResolutionRow } from './lifecycle-metrics/apply.ts';
import { declareLifecycleGauges, declareRefreshMetrics } from './lifecycle-metrics/gauges.ts';
import { coveredWindows } from './lifecycle-metrics/kv.ts';

/**
 * Lifecycle gauges for Prometheus: the named queries of queries/sql run over [now - window, now] on each
 * refresh, and their results replace the previous values. Labels are bounded: cluster, engine ids, backend,
 * resolution, flag kind and severity; never request ids. The KV gauges speak of the 10 s windows completed since the
 * previous refresh, so none goes unseen between two refreshes.
 */
export interface LifecycleMetricsOptions {
  client: ClickHouseClient;
  database: string;
  registry?: Registry;
  /** Width of the window every gauge covers (default 15 minutes). */
  windowMs?: number;
  log: Logger;
  /** One cluster, or all when empty (default). */
  cluster?: string;
  /** How far back an open hold is still counted by the open-holds gauges (default 6 hours, at least the window). */
  openHoldLookbackMs?: number;
  /** Detection thresholds for the flag counts, the storms and the open-past-timeout grace (defaults of flagThresholdsSchema). */
  thresholds?: Partial<FlagThresholds>;
  /** The clock, for tests (default Date.now). */
  now?: () => number;
  /** The limits of the gauges' reads (DEFAULT_READ_LIMITS); the window and the open-holds lookback must fit maxReadWindowMs. */
  readLimits?: ReadLimits;
}

export interface LifecycleMetrics {
  registry: Registry;
  /** Runs the queries and replaces the gauges; never rejects: a failure is logged and counted, and the previous values stay. */
  refresh(): Promise<void>;
  /** Refreshes now and every intervalMs (the timer does not keep the process alive). */
  start(intervalMs?: number): void;
  stop(): void;
}

function describeWindow(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  return `${ms / 1000}s`;
}

/** The gauges' ranges are fixed: a range the read limits refuse would fail every refresh, so it stops the start-up. */
function checkRanges(limits: ReadLimits, ranges: [string, number][]): void {
  for (const [what, ms] of ranges) {
    if (ms > limits.maxReadWindowMs) {
      throw new ConfigError(
        `lifecycle metrics: the ${what} (${describeDuration(ms)}) is wider than a read may cover (maxReadWindowMs: ${describeDuration(limits.maxReadWindowMs)})`,
      );
    }
  }
}

interface Reader {
  client: ClickHouseClient;
  database: string;
  cluster: string;
  windowMs: number;
  lookbackMs: number;
  thresholds: FlagThresholds;
  limits: ReadLimits;
}

/** One round of the gauges' queries, in parallel, at time `t`. */
async function collect(r: Reader, t: number): Promise<Omit<RefreshRound, 'cover'>> {
  const { client, database, thresholds, limits } = r;
  const read = { limits };
  const readFromMs = t - r.windowMs;
  const from = new Date(readFromMs).toISOString();
  const to = new Date(t).toISOString();
  const params = { from, to, cluster: r.cluster };
  // The seconds just before `to` are sampled by kv_pinned too, so the latest complete window is known in full; its
  // aborts are read a storm baseline further back, so that the range's first windows are judged as the flag does.
  const [mix, tails, pinned, open, flagList] = await Promise.all([
    runQuery<ResolutionRow>(
      client,
      database,
      'resolution_mix',
      { ...params, bucket_seconds: String(Math.max(1, Math.ceil(r.windowMs / 1000))) },
      read,
    ),
    runQuery<TailRow>(client, database, 'transfer_tails', { ...params, by_decode_engine: '1' }, read),
    runQuery<PinnedRow>(client, database, 'kv_pinned', { ...params, ...stormReadParams(thresholds) }, read),
    runQuery<OpenRow>(
      client,
      database,
      'open_holds',
      { ...params, from: new Date(t - r.lookbackMs).toISOString(), open_hold_grace_ms: String(thresholds.openHoldGraceMs) },
      read,
    ),
    computeFlags(client, database, params, thresholds, { limits }),
  ]);
  return { t, readFromMs, mix, tails, pinned, open, flagList };
}

export function createLifecycleMetrics(options: LifecycleMetricsOptions): LifecycleMetrics {
  const { client, database, log } = options;
  const registry = options.registry ?? new Registry();
  const windowMs = options.windowMs ?? 15 * 60_000;
  const lookbackMs = Math.max(windowMs, options.openHoldLookbackMs ?? 6 * 3_600_000);
  const thresholds = flagThresholdsSchema.parse(options.thresholds ?? {});
  const now = options.now ?? Date.now;
  const limits = options.readLimits ?? DEFAULT_READ_LIMITS;
  checkRanges(limits, [
    ['window', windowMs],
    ['open-holds lookback', lookbackMs],
  ]);
  const reader: Reader = { client, database, cluster: options.cluster ?? '', windowMs, lookbackMs, thresholds, limits };
  const gauges = declareLifecycleGauges(
    registry,
    { w: `over the last ${describeWindow(windowMs)}`, lookback: describeWindow(lookbackMs) },
    thresholds,
  );
  const health = declareRefreshMetrics(registry);
  // The end of the KV windows the last successful refresh covered: the next covers every window completed since.
  let coveredTo: number | undefined;

  async function refreshOnce(): Promise<void> {
    const started = Date.now();
    try {
      const round = await collect(reader, now());
      const cover = coveredWindows(round.t, coveredTo, round.readFromMs);
      applyRound(gauges, { ...round, cover }, thresholds);
      coveredTo = cover.toMs;
      health.timestamp.set(round.t / 1000);
      health.duration.set((Date.now() - started) / 1000);
    } catch (error) {
      health.failures.inc();
      log.warn(
        { err: error instanceof Error ? error.message : String(error), database },
        'lifecycle metrics refresh failed; keeping the previous values',
      );
    }
  }

  let inFlight: Promise<void> | undefined;
  function refresh(): Promise<void> {
    // A refresh still running answers for the next caller too: queries never pile up behind a slow ClickHouse.
    inFlight ??= refreshOnce().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  }

  let timer: NodeJS.Timeout | undefined;
  return {
    registry,
    refresh,
    start(intervalMs = 15_000) {
      if (timer) return;
      void refresh();
      timer = setInterval(() => void refresh(), intervalMs);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}
