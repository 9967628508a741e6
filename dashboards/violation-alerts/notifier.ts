// The violation push: looks up the current incidents when a record is stored (a nudge) or every poll interval, decides
// which alerts are due (tracker.ts) and hands them to each Alertmanager's queue (alertmanager.ts). Nothing here blocks
// its caller: a nudge only schedules a lookup, and a slow or failing Alertmanager holds back nothing but its own queue.
import { Registry } from 'prom-client';
import { ConfigError, type ClickHouseClient, type Logger, type RetryPolicy } from '../../common/index.ts';
import { sleep } from '../../common/retry.ts';
import { describeDuration, listIncidents, type IncidentReport, type ReadLimits } from '../../queries/index.ts';
import { AlertmanagerTarget, type Delivery } from './alertmanager.ts';
import type { ViolationAlertsConfig } from './config.ts';
import { createViolationAlertMetrics, type ViolationAlertMetrics } from './metrics.ts';
import { IncidentTracker } from './tracker.ts';

/**
 * How far before the quiet period a lookup reaches, by the lifecycles' last spans: a record stored up to this long
 * after its lifecycle's last span (a pipeline catching up on Kafka lag) still pages.
 */
const LOOKBACK_MARGIN_MS = 15 * 60_000;
/** Lifecycles a lookup considers began at most this long before its range: holds and their transfers last minutes. */
const MAX_LIFECYCLE_HOURS = 6;
/** How far ahead a lookup reaches: spans within the collector's default clock skew (1 h) ahead are stored, and page. */
const LOOKAHEAD_MS = 3_600_000;
/** Least time between the starts of two lookups: under load records are stored every few ms, and one read serves them all. */
const MIN_LOOKUP_GAP_MS = 200;
/** Incidents tracked (and read per lookup) at most: far more than an on-call can act on, and a bounded read and memory. */
const DEFAULT_MAX_TRACKED = 1000;
/** 500 ms doubling to 10 s: an Alertmanager back from a restart gets the alerts within seconds, without a storm of POSTs. */
const PUSH_RETRY_POLICY: RetryPolicy = { initialMs: 500, maxMs: 10_000 };

export interface ViolationAlertsOptions {
  config: ViolationAlertsConfig;
  /** The pages' base URL, without a trailing slash: links in the alerts are absolute. */
  externalUrl: string;
  /** The reads' client: a lookup is a read, bounded by the read gate like the pages'. */
  client: ClickHouseClient;
  database: string;
  readLimits?: ReadLimits;
  log: Logger;
  /** The metrics go here; the caller merges it into /metrics (a new registry when omitted). */
  registry?: Registry;
  /** The clock, for tests (default Date.now). */
  now?: () => number;
  /** Told of each POST an Alertmanager accepted (the bench times alerts with it). */
  onDelivered?: (delivery: Delivery) => void;
  maxTracked?: number;
}

export interface ViolationAlerts {
  readonly registry: Registry;
  /** Whether any Alertmanager is configured: without one, start and nudge do nothing and push_enabled is 0. */
  readonly enabled: boolean;
  /** Looks up now, then every poll interval. */
  start(): void;
  /** Records were stored: look up now. At most one lookup runs and one more waits; never blocks. */
  nudge(): void;
  /** A lookup now; resolves once its alerts are queued for every Alertmanager. */
  lookupNow(): Promise<void>;
  /** Stops looking up and sending at once; a POST in flight is aborted. */
  shutdown(): Promise<void>;
}

export function createViolationAlerts(options: ViolationAlertsOptions): ViolationAlerts {
  return new ViolationNotifier(options);
}

class ViolationNotifier implements ViolationAlerts {
  readonly registry: Registry;
  readonly enabled: boolean;
  private readonly metrics: ViolationAlertMetrics;
  private readonly tracker: IncidentTracker;
  private readonly targets: AlertmanagerTarget[];
  private readonly now: () => number;
  private readonly maxTracked: number;
  private readonly stopping = new AbortController();
  private started = false;
  private running: Promise<void> | undefined;
  private queued = false;
  private timer: NodeJS.Timeout | undefined;
  private lookupFailing = false;

  constructor(private readonly options: ViolationAlertsOptions) {
    const { config } = options;
    this.metrics = createViolationAlertMetrics(options.registry);
    this.registry = this.metrics.registry;
    this.enabled = config.alertmanagerUrl.length > 0;
    this.metrics.pushEnabled.set(this.enabled ? 1 : 0);
    this.now = options.now ?? Date.now;
    this.maxTracked = options.maxTracked ?? DEFAULT_MAX_TRACKED;
    const maxReadWindowMs = options.readLimits?.maxReadWindowMs;
    if (this.enabled && maxReadWindowMs !== undefined && this.rangeMs() > maxReadWindowMs) {
      throw new ConfigError(
        `violation alerts: a lookup covers ${describeDuration(this.rangeMs())} (the quiet period, ${describeDuration(LOOKBACK_MARGIN_MS)} ` +
          `before it and ${describeDuration(LOOKAHEAD_MS)} ahead), wider than a read may cover (maxReadWindowMs: ${describeDuration(maxReadWindowMs)})`,
      );
    }
    this.tracker = new IncidentTracker({ quietMs: config.alertQuietMs, resendMs: config.alertResendMs, maxTracked: this.maxTracked });
    this.targets = config.alertmanagerUrl.map(
      (url) =>
        new AlertmanagerTarget(url, {
          links: { externalUrl: options.externalUrl, resendMs: config.alertResendMs },
          timeoutMs: config.alertPushTimeoutMs,
          maxPending: 2 * this.maxTracked,
          retry: PUSH_RETRY_POLICY,
          metrics: this.metrics,
          log: options.log,
          now: this.now,
          onDelivered: options.onDelivered,
        }),
    );
  }

  start(): void {
    if (!this.enabled || this.started || this.stopping.signal.aborted) return;
    this.started = true;
    const { config } = this.options;
    this.options.log.info(
      {
        alertmanagers: this.targets.map((t) => t.name),
        externalUrl: this.options.externalUrl,
        pollMs: config.alertPollMs,
        resendMs: config.alertResendMs,
        quietMs: config.alertQuietMs,
      },
      'violation alerts (late_write, unsafe_release, ack_after_failed_send, stale_ack_consumed, admission_leak, ' +
        'checksum_mismatch) are pushed to Alertmanager as their records are stored',
    );
    this.nudge();
  }

  nudge(): void {
    if (!this.started || this.stopping.signal.aborted) return;
    if (this.running) {
      this.queued = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = this.loop();
  }

  async lookupNow(): Promise<void> {
    this.nudge();
    await this.running;
  }

  async shutdown(): Promise<void> {
    this.stopping.abort();
    clearTimeout(this.timer);
    await this.running;
    await Promise.all(this.targets.map((t) => t.shutdown()));
  }

  private rangeMs(): number {
    return this.options.config.alertQuietMs + LOOKBACK_MARGIN_MS + LOOKAHEAD_MS;
  }

  /** Lookups back to back while nudged, at most one every MIN_LOOKUP_GAP_MS; then the poll timer. Never rejects. */
  private async loop(): Promise<void> {
    try {
      do {
        this.queued = false;
        const began = performance.now();
        await this.round();
        if (this.queued) await sleep(MIN_LOOKUP_GAP_MS - (performance.now() - began), this.stopping.signal);
      } while (this.queued && !this.stopping.signal.aborted);
    } finally {
      this.running = undefined;
      if (!this.stopping.signal.aborted) {
        this.timer = setTimeout(() => this.nudge(), this.options.config.alertPollMs);
        this.timer.unref();
      }
    }
  }

  private async round(): Promise<void> {
    const nowMs = this.now();
    const report = await this.lookup(nowMs);
    if (this.stopping.signal.aborted) return;
    const due = this.tracker.step(report, nowMs);
    this.metrics.active.set(this.tracker.active);
    this.metrics.untracked.set(this.tracker.untracked);
    if (due.length > 0) for (const target of this.targets) target.enqueue(due);
  }

  /** The incidents that may be active at `nowMs`, or undefined when the read failed (counted and logged). */
  private async lookup(nowMs: number): Promise<IncidentReport | undefined> {
    const { client, database, readLimits, log } = this.options;
    const rangeMs = this.rangeMs();
    const window = {
      from: new Date(nowMs - this.options.config.alertQuietMs - LOOKBACK_MARGIN_MS).toISOString(),
      to: new Date(nowMs + LOOKAHEAD_MS).toISOString(),
    };
    const timer = this.metrics.lookupSeconds.startTimer();
    try {
      const report = await listIncidents(client, database, window, {
        maxIncidents: this.maxTracked,
        // The range already reaches back past the quiet period; a violation in a lifecycle that began hours before it
        // is still found, and no lookup reads the flagged records of the whole retention.
        maxLifecycleHours: MAX_LIFECYCLE_HOURS,
        examples: 3,
        // One sparkline bucket: the alerts do not show it.
        bucketSeconds: Math.ceil(rangeMs / 1000),
        limits: readLimits,
        signal: this.stopping.signal,
      });
      if (this.lookupFailing) log.info('violation lookups succeed again');
      this.lookupFailing = false;
      return report;
    } catch (error) {
      if (this.stopping.signal.aborted) return undefined;
      this.metrics.lookupFailures.inc();
      if (!this.lookupFailing) log.warn({ err: (error as Error).message }, 'violation lookup failed; alerts already firing are kept');
      this.lookupFailing = true;
      return undefined;
    } finally {
      timer();
    }
  }
}
