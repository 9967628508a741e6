import { Counter, Gauge, Registry } from 'prom-client';
import { ConfigError, type ClickHouseClient, type Logger } from '../common/index.ts';
import {
  computeFlags,
  DEFAULT_READ_LIMITS,
  describeDuration,
  firstStormWindow,
  flagThresholdsSchema,
  runQuery,
  STORM_WINDOW_MS,
  trailingMedianAborts,
  type FlagThresholds,
  type PinnedRow,
  type ReadLimits,
  type TailRow,
} from '../queries/index.ts';

/**
 * Lifecycle gauges for Prometheus: the named queries of queries/sql run over [now - window, now] on each
 * refresh, and their results replace the previous values. Labels are bounded: cluster, engine ids, backend,
 * resolution, flag kind and severity; never request ids.
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
  /** Detection thresholds for the flag counts and the open-past-timeout grace (defaults of flagThresholdsSchema). */
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

interface ResolutionRow {
  cluster: string;
  decode_engine: string;
  holds: number;
  drained: number;
  timeouts: number;
  open: number;
}

interface OpenRow {
  cluster: string;
  decode_engine: string;
  open: number;
  open_past_timeout: number;
}

function describeWindow(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  return `${ms / 1000}s`;
}

const num = (x: unknown) => {
  const n = Number(x);
  return Number.isFinite(n) ? n : 0;
};

// eslint-disable-next-line max-lines-per-function -- not yet split: declares every lifecycle gauge with the refresh round that sets them
export function createLifecycleMetrics(options: LifecycleMetricsOptions): LifecycleMetrics {
  const { client, database, log } = options;
  const registry = options.registry ?? new Registry();
  const windowMs = options.windowMs ?? 15 * 60_000;
  const lookbackMs = Math.max(windowMs, options.openHoldLookbackMs ?? 6 * 3_600_000);
  const thresholds = flagThresholdsSchema.parse(options.thresholds ?? {});
  const now = options.now ?? Date.now;
  const cluster = options.cluster ?? '';
  const limits = options.readLimits ?? DEFAULT_READ_LIMITS;
  // The gauges' ranges are fixed: a range the read limits refuse would fail every refresh, so it stops the start-up.
  for (const [what, ms] of [
    ['window', windowMs],
    ['open-holds lookback', lookbackMs],
  ] as const) {
    if (ms > limits.maxReadWindowMs) {
      throw new ConfigError(
        `lifecycle metrics: the ${what} (${describeDuration(ms)}) is wider than a read may cover (maxReadWindowMs: ${describeDuration(limits.maxReadWindowMs)})`,
      );
    }
  }
  const read = { limits };
  const w = `over the last ${describeWindow(windowMs)}`;
  const registers = [registry];

  const resolutions = new Gauge({
    name: 'holdscope_hold_resolutions',
    help: `Holds started ${w}, per decode engine, by resolution (drained, timeout, open)`,
    labelNames: ['cluster', 'decode_engine', 'resolution'],
    registers,
  });
  const timeoutShare = new Gauge({
    name: 'holdscope_hold_timeout_share',
    help: `Share of the holds started ${w} and resolved that resolved by timeout, per decode engine (0..1)`,
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const tailP99 = new Gauge({
    name: 'holdscope_transfer_tail_p99_ms',
    help: `p99 transfer tail (last successful write completion minus ABORT, ms) of holds started ${w}, per prefill engine and backend`,
    labelNames: ['cluster', 'prefill_engine', 'backend'],
    registers,
  });
  const tailTimeout = new Gauge({
    name: 'holdscope_transfer_tail_hold_timeout_ms',
    help: `Largest hold timeout (ms) of the holds behind holdscope_transfer_tail_p99_ms ${w}, per prefill engine and backend`,
    labelNames: ['cluster', 'prefill_engine', 'backend'],
    registers,
  });
  const tailHolds = new Gauge({
    name: 'holdscope_transfer_tail_holds',
    help: `Holds with a transfer tail started ${w} (the sample size of the p99), per prefill engine and backend`,
    labelNames: ['cluster', 'prefill_engine', 'backend'],
    registers,
  });
  const tailOverTimeout = new Gauge({
    name: 'holdscope_transfer_tail_over_timeout',
    help: `Holds started ${w} whose transfer tail outlasted their own hold timeout, per prefill engine and backend`,
    labelNames: ['cluster', 'prefill_engine', 'backend'],
    registers,
  });
  const pinnedFraction = new Gauge({
    name: 'holdscope_kv_pinned_fraction',
    help:
      'Peak share of KV capacity pinned by holds in the latest complete 10 s window, per decode engine (0..1; engines active ' + w + ')',
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const windowAborts = new Gauge({
    name: 'holdscope_kv_window_aborts',
    help: 'Aborts (holds started) in the latest complete 10 s window, per decode engine (engines active ' + w + ')',
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const trailingAborts = new Gauge({
    name: 'holdscope_kv_aborts_trailing_median',
    help: `Median aborts per 10 s window over the ${thresholds.stormTrailingWindows} windows before the latest complete one, per decode engine (the abort-storm baseline)`,
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const openHolds = new Gauge({
    name: 'holdscope_open_holds',
    help: `Holds still open (KV pinned, no release yet), started over the last ${describeWindow(lookbackMs)}, per decode engine`,
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const openPastTimeout = new Gauge({
    name: 'holdscope_open_holds_past_timeout',
    help: `Holds open longer than their timeout plus ${thresholds.openHoldGraceMs} ms grace, started over the last ${describeWindow(lookbackMs)}, per decode engine`,
    labelNames: ['cluster', 'decode_engine'],
    registers,
  });
  const flags = new Gauge({
    name: 'holdscope_flags',
    help: `Flags (as /api/flags computes them) ${w}, by cluster, kind and severity`,
    labelNames: ['cluster', 'kind', 'severity'],
    registers,
  });
  const refreshTimestamp = new Gauge({
    name: 'holdscope_metrics_refresh_timestamp_seconds',
    help: 'Unix time of the last successful refresh of the holdscope lifecycle gauges',
    registers,
  });
  const refreshDuration = new Gauge({
    name: 'holdscope_metrics_refresh_duration_seconds',
    help: 'How long the last successful refresh of the holdscope lifecycle gauges took',
    registers,
  });
  const refreshFailures = new Counter({
    name: 'holdscope_metrics_refresh_failures_total',
    help: 'Refreshes of the holdscope lifecycle gauges that failed (the previous values were kept)',
    registers,
  });

  const all = [
    resolutions,
    timeoutShare,
    tailP99,
    tailTimeout,
    tailHolds,
    tailOverTimeout,
    pinnedFraction,
    windowAborts,
    trailingAborts,
    openHolds,
    openPastTimeout,
    flags,
  ];

  async function collect() {
    const t = now();
    const from = new Date(t - windowMs).toISOString();
    const to = new Date(t).toISOString();
    const params = { from, to, cluster };
    // The seconds just before `to` are sampled by kv_pinned too, so the latest complete window is known in full.
    const [mix, tails, pinned, open, flagList] = await Promise.all([
      runQuery<ResolutionRow>(
        client,
        database,
        'resolution_mix',
        { ...params, bucket_seconds: String(Math.max(1, Math.ceil(windowMs / 1000))) },
        read,
      ),
      runQuery<TailRow>(client, database, 'transfer_tails', params, read),
      runQuery<PinnedRow>(client, database, 'kv_pinned', params, read),
      runQuery<OpenRow>(
        client,
        database,
        'open_holds',
        { ...params, from: new Date(t - lookbackMs).toISOString(), open_hold_grace_ms: String(thresholds.openHoldGraceMs) },
        read,
      ),
      computeFlags(client, database, { from, to, cluster }, thresholds, { limits }),
    ]);
    return { t, mix, tails, pinned, open, flagList };
  }

  function apply({ t, mix, tails, pinned, open, flagList }: Awaited<ReturnType<typeof collect>>): void {
    for (const g of all) g.reset();

    // resolution_mix buckets by time: a window-wide bucket may still straddle two buckets, so sum per engine.
    const engines = new Map<string, { cluster: string; decode_engine: string; drained: number; timeouts: number; open: number }>();
    const engineKey = (c: string, e: string) => JSON.stringify([c, e]);
    for (const row of mix) {
      const key = engineKey(row.cluster, row.decode_engine);
      const e = engines.get(key) ?? { cluster: row.cluster, decode_engine: row.decode_engine, drained: 0, timeouts: 0, open: 0 };
      e.drained += num(row.drained);
      e.timeouts += num(row.timeouts);
      e.open += num(row.open);
      engines.set(key, e);
    }
    for (const e of engines.values()) {
      const labels = { cluster: e.cluster, decode_engine: e.decode_engine };
      resolutions.set({ ...labels, resolution: 'drained' }, e.drained);
      resolutions.set({ ...labels, resolution: 'timeout' }, e.timeouts);
      resolutions.set({ ...labels, resolution: 'open' }, e.open);
      if (e.drained + e.timeouts > 0) timeoutShare.set(labels, e.timeouts / (e.drained + e.timeouts));
    }

    for (const row of tails) {
      const labels = { cluster: row.cluster, prefill_engine: row.prefill_engine, backend: row.backend };
      tailP99.set(labels, num(row.p99_ms));
      tailTimeout.set(labels, num(row.timeout_ms));
      tailHolds.set(labels, num(row.holds));
      tailOverTimeout.set(labels, num(row.over_timeout));
    }

    // The latest complete 10 s window, and the median aborts of the windows before it (queries/storms.ts).
    const latest = firstStormWindow(t) - STORM_WINDOW_MS;
    const first = firstStormWindow(t - windowMs);
    const byEngine = new Map<string, PinnedRow[]>();
    for (const row of pinned) {
      const key = engineKey(row.cluster, row.decode_engine);
      const list = byEngine.get(key);
      if (list) list.push(row);
      else byEngine.set(key, [row]);
    }
    for (const rows of byEngine.values()) {
      const head = rows[0] as PinnedRow;
      const labels = { cluster: head.cluster, decode_engine: head.decode_engine };
      const windows = rows.map((r) => ({ t: Date.parse(r.window_start), aborts: num(r.aborts), row: r }));
      const capacity = rows.reduce((max, r) => Math.max(max, num(r.capacity_slots)), 0);
      const current = windows.find((w) => w.t === latest)?.row;
      windowAborts.set(labels, num(current?.aborts));
      if (capacity > 0) pinnedFraction.set(labels, num(current?.peak_pinned_slots) / capacity);
      trailingAborts.set(labels, trailingMedianAborts(windows, latest, first, thresholds.stormTrailingWindows));
    }

    // Engines seen in the window read 0 open holds rather than vanishing.
    for (const e of engines.values()) {
      openHolds.set({ cluster: e.cluster, decode_engine: e.decode_engine }, 0);
      openPastTimeout.set({ cluster: e.cluster, decode_engine: e.decode_engine }, 0);
    }
    for (const row of open) {
      const labels = { cluster: row.cluster, decode_engine: row.decode_engine };
      openHolds.set(labels, num(row.open));
      openPastTimeout.set(labels, num(row.open_past_timeout));
    }

    for (const total of flagList.totals) flags.set({ cluster: total.cluster, kind: total.kind, severity: total.severity }, total.count);
  }

  let inFlight: Promise<void> | undefined;
  async function refreshOnce(): Promise<void> {
    const started = Date.now();
    try {
      const results = await collect();
      apply(results);
      refreshTimestamp.set(results.t / 1000);
      refreshDuration.set((Date.now() - started) / 1000);
    } catch (error) {
      refreshFailures.inc();
      log.warn(
        { err: error instanceof Error ? error.message : String(error), database },
        'lifecycle metrics refresh failed; keeping the previous values',
      );
    }
  }

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
