// The lifecycle gauges' declarations: names, help and labels, the contract the alert rules
// (dashboards/alerts/holdscope.rules.yml) are written against. Units are base units (seconds, shares 0..1).
import { Counter, Gauge, type Registry } from 'prom-client';
import type { FlagThresholds } from '../../queries/index.ts';

const ENGINE = ['cluster', 'decode_engine'];
const PAIRING = ['cluster', 'prefill_engine', 'decode_engine', 'backend'];

/** The help texts' windows: `w` the gauges' ("over the last 15m"), `lookback` the open holds' ("6h"). */
export interface GaugeTexts {
  w: string;
  lookback: string;
}

// eslint-disable-next-line max-lines-per-function -- one declaration per gauge, nothing else
export function declareLifecycleGauges(registry: Registry, { w, lookback }: GaugeTexts, t: FlagThresholds) {
  const registers = [registry];
  const gauge = (name: string, help: string, labelNames: string[] = []) => new Gauge({ name, help, labelNames, registers });
  const since = 'in the 10 s windows completed since the previous refresh';
  return {
    resolutions: gauge('holdscope_hold_resolutions', `Holds started ${w}, per decode engine, by resolution (drained, timeout, open)`, [
      ...ENGINE,
      'resolution',
    ]),
    timeoutShare: gauge(
      'holdscope_hold_timeout_share',
      `Share of the holds started ${w} and resolved that resolved by timeout, per decode engine (0..1)`,
      ENGINE,
    ),
    timeoutShareLowerBound: gauge(
      'holdscope_hold_timeout_share_lower_bound',
      `95% Wilson lower bound of holdscope_hold_timeout_share ${w}, per decode engine (0..1): what the timeout_heavy flag compares with timeoutHeavyShare (${t.timeoutHeavyShare})`,
      ENGINE,
    ),
    tailP99: gauge(
      'holdscope_transfer_tail_p99_seconds',
      `p99 transfer tail (last successful write completion minus ABORT) of holds started ${w}, per pairing (prefill engine, decode engine, backend)`,
      PAIRING,
    ),
    tailTimeout: gauge(
      'holdscope_transfer_tail_hold_timeout_seconds',
      `The pairing's hold timeout (the largest of the holds behind holdscope_transfer_tail_p99_seconds) ${w}, per pairing`,
      PAIRING,
    ),
    tailHolds: gauge(
      'holdscope_transfer_tail_holds',
      `Holds with a transfer tail started ${w} (the sample size of the p99), per pairing`,
      PAIRING,
    ),
    tailOverTimeout: gauge(
      'holdscope_transfer_tail_over_timeout',
      `Holds started ${w} whose transfer tail outlasted their own hold timeout, per pairing`,
      PAIRING,
    ),
    pinnedFraction: gauge(
      'holdscope_kv_pinned_fraction',
      `Peak share of KV capacity pinned by holds ${since} (at least the latest complete 10 s window), per decode engine (0..1; engines active ${w})`,
      ENGINE,
    ),
    stormPinnedFraction: gauge(
      'holdscope_kv_storm_pinned_fraction',
      `Peak share of KV capacity pinned by holds in the abort-storm windows among those ${since} (0 when none; a 10 s window as kv_capacity_exhaustion judges it), per decode engine (engines active ${w})`,
      ENGINE,
    ),
    abortStorm: gauge(
      'holdscope_kv_abort_storm',
      `1 when any of the 10 s windows completed since the previous refresh is an abort storm (kv_capacity_exhaustion's definition, after the warm-up), else 0, per decode engine (engines active ${w})`,
      ENGINE,
    ),
    baselineReady: gauge(
      'holdscope_kv_storm_baseline_ready',
      `1 when the latest complete 10 s window is past the engine's abort-storm warm-up (holdscope has its data from ${t.stormTrailingWindows} windows before), else 0: no storm verdict yet, per decode engine (engines active ${w})`,
      ENGINE,
    ),
    windowAborts: gauge(
      'holdscope_kv_window_aborts',
      `Aborts (holds started) in the latest complete 10 s window, per decode engine (engines active ${w})`,
      ENGINE,
    ),
    trailingAborts: gauge(
      'holdscope_kv_aborts_trailing_median',
      `Median aborts per 10 s window over the ${t.stormTrailingWindows} windows before the latest complete one, per decode engine (the abort-storm baseline; engines active ${w})`,
      ENGINE,
    ),
    openHolds: gauge(
      'holdscope_open_holds',
      `Holds still open (KV pinned, no release yet), started over the last ${lookback}, per decode engine`,
      ENGINE,
    ),
    openPastTimeout: gauge(
      'holdscope_open_holds_past_timeout',
      `Holds open longer than their timeout plus ${t.openHoldGraceMs} ms grace, started over the last ${lookback}, per decode engine`,
      ENGINE,
    ),
    flags: gauge('holdscope_flags', `Flags (as /api/flags computes them) ${w}, by cluster, kind and severity`, [
      'cluster',
      'kind',
      'severity',
    ]),
  };
}

export type LifecycleGauges = ReturnType<typeof declareLifecycleGauges>;

/** The refresh's own health: when it last succeeded, how long it took, how often it failed. */
export function declareRefreshMetrics(registry: Registry) {
  const registers = [registry];
  return {
    timestamp: new Gauge({
      name: 'holdscope_metrics_refresh_timestamp_seconds',
      help: 'Unix time of the last successful refresh of the holdscope lifecycle gauges',
      registers,
    }),
    duration: new Gauge({
      name: 'holdscope_metrics_refresh_duration_seconds',
      help: 'How long the last successful refresh of the holdscope lifecycle gauges took',
      registers,
    }),
    failures: new Counter({
      name: 'holdscope_metrics_refresh_failures_total',
      help: 'Refreshes of the holdscope lifecycle gauges that failed (the previous values were kept)',
      registers,
    }),
  };
}
