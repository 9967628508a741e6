// One Alertmanager's queue: the latest alert of each incident waits here until a POST carrying it succeeds. One POST
// is in flight at a time and carries every alert due; a failed one is tried again with backoff and jitter, its alerts
// replaced meanwhile by any newer state of their incident, so the queue never holds more than one alert per incident.
import { HoldscopeError, UnavailableError, type Logger, type RetryPolicy } from '../../common/index.ts';
import { retryDelayMs, sleep } from '../../common/retry.ts';
import { toAlertmanagerAlert, type AlertLinks, type AlertState } from './alerts.ts';
import type { ViolationAlertMetrics } from './metrics.ts';

/** An alert Alertmanager accepted, with what the bench needs to time it against the span that raised it. */
export interface DeliveredAlert {
  incidentId: string;
  cluster: string;
  kind: string;
  state: 'firing' | 'resolved';
  violations: number;
  /** When the newest record of the incident was stored (ISO 8601), as of this alert. */
  lastComputedAt: string;
}

/** One POST an Alertmanager accepted: which one, when it answered (the notifier's clock, ms) and what it carried. */
export interface Delivery {
  alertmanager: string;
  atMs: number;
  alerts: DeliveredAlert[];
}

export interface AlertmanagerTargetOptions {
  links: AlertLinks & { resendMs: number };
  timeoutMs: number;
  /** Alerts waiting at most; past it the oldest are dropped (and counted undelivered): a bound through a long outage. */
  maxPending: number;
  retry: RetryPolicy;
  metrics: ViolationAlertMetrics;
  log: Logger;
  now: () => number;
  onDelivered?: (delivery: Delivery) => void;
}

/** A 4xx other than 408 and 429 refuses the alerts themselves: sending them again would be refused again. */
const refusesContent = (status: number) => status >= 400 && status < 500 && status !== 408 && status !== 429;

/** The POST endpoint and the name used in logs and labels, credentials moved into a header (fetch refuses them in URLs). */
function endpointOf(baseUrl: string): { name: string; endpoint: string; headers: Record<string, string> } {
  const url = new URL(`${baseUrl}/api/v2/alerts`);
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (url.username || url.password) {
    const user = decodeURIComponent(url.username);
    const password = decodeURIComponent(url.password);
    headers.authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
    url.username = '';
    url.password = '';
  }
  return { name: url.href.replace(/\/api\/v2\/alerts$/, ''), endpoint: url.href, headers };
}

/** fetch says only "fetch failed"; the reason (ECONNREFUSED, a timeout) is in its cause. */
function describeError(error: unknown): string {
  const { message, cause } = error as Error & { cause?: { message?: string; code?: string } };
  const why = cause?.code ?? cause?.message;
  return why ? `${message} (${why})` : message;
}

export class AlertmanagerTarget {
  readonly name: string;
  private readonly endpoint: string;
  private readonly headers: Record<string, string>;
  private readonly pending = new Map<string, AlertState>();
  private readonly stopping = new AbortController();
  private draining: Promise<void> | undefined;
  private failing = false;

  constructor(
    baseUrl: string,
    private readonly options: AlertmanagerTargetOptions,
  ) {
    ({ name: this.name, endpoint: this.endpoint, headers: this.headers } = endpointOf(baseUrl));
    options.metrics.pending.set({ alertmanager: this.name }, 0);
    options.metrics.undelivered.inc({ alertmanager: this.name }, 0);
  }

  /** Queues the alerts (each replacing a waiting one of its incident) and starts a POST unless one is in flight. Never blocks. */
  enqueue(alerts: AlertState[]): void {
    if (this.stopping.signal.aborted) return;
    for (const alert of alerts) {
      this.pending.delete(alert.incident.id); // re-inserted last: the oldest are the first dropped past the bound
      this.pending.set(alert.incident.id, alert);
    }
    this.dropPastBound();
    this.kick();
  }

  /** Stops at once: the POST in flight is aborted and nothing more is sent. */
  async shutdown(): Promise<void> {
    this.stopping.abort();
    await this.draining;
  }

  private dropPastBound(): void {
    const over = this.pending.size - this.options.maxPending;
    if (over <= 0) return;
    for (const id of [...this.pending.keys()].slice(0, over)) this.pending.delete(id);
    this.options.metrics.undelivered.inc({ alertmanager: this.name }, over);
    this.options.log.warn({ alertmanager: this.name, dropped: over }, 'violation alerts dropped: too many waiting for an Alertmanager');
  }

  private kick(): void {
    this.options.metrics.pending.set({ alertmanager: this.name }, this.pending.size);
    if (this.draining || this.stopping.signal.aborted || this.pending.size === 0) return;
    this.draining = this.drain().finally(() => {
      this.draining = undefined;
      this.kick();
    });
  }

  private async drain(): Promise<void> {
    for (let failures = 0; this.pending.size > 0 && !this.stopping.signal.aborted;) {
      const batch = [...this.pending.values()];
      this.pending.clear();
      this.options.metrics.pending.set({ alertmanager: this.name }, 0);
      const outcome = await this.post(batch);
      if (outcome === 'delivered') {
        failures = 0;
        continue;
      }
      if (outcome === 'retry') {
        // Back in the queue unless a newer state of the incident came meanwhile; then a pause before the next try.
        const newer = new Map(this.pending);
        this.pending.clear();
        for (const alert of batch) this.pending.set(alert.incident.id, alert);
        for (const [id, alert] of newer) this.pending.set(id, alert);
        this.dropPastBound();
        this.options.metrics.pending.set({ alertmanager: this.name }, this.pending.size);
        await sleep(retryDelayMs(this.options.retry, ++failures), this.stopping.signal);
      }
    }
  }

  /** One POST of `batch`: delivered, to retry, or refused for good (then dropped). Never rejects. */
  private async post(batch: AlertState[]): Promise<'delivered' | 'retry' | 'refused'> {
    const { metrics, log } = this.options;
    const nowMs = this.options.now();
    const body = JSON.stringify(batch.map((alert) => toAlertmanagerAlert(alert, nowMs, this.options.links)));
    const stopTimer = metrics.pushSeconds.startTimer({ alertmanager: this.name });
    try {
      const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(this.options.timeoutMs)]);
      const response = await fetch(this.endpoint, { method: 'POST', headers: this.headers, body, signal });
      const text = await response.text();
      if (!response.ok) {
        const message = `Alertmanager ${this.name} answered ${response.status}: ${text.slice(0, 300)}`;
        throw refusesContent(response.status) ? new HoldscopeError('ALERTMANAGER_REFUSED', message) : new UnavailableError(message);
      }
    } catch (error) {
      stopTimer();
      if (this.stopping.signal.aborted) return 'refused';
      metrics.undelivered.inc({ alertmanager: this.name }, batch.length);
      const retriable = !(error instanceof HoldscopeError) || error.retriable;
      const fields = { alertmanager: this.name, alerts: batch.length, err: describeError(error) };
      if (!retriable) log.error(fields, 'Alertmanager refused violation alerts; they are dropped');
      else if (!this.failing) log.warn(fields, 'violation alerts not delivered to Alertmanager; retrying with backoff');
      this.failing = retriable;
      return retriable ? 'retry' : 'refused';
    }
    stopTimer();
    if (this.failing) log.info({ alertmanager: this.name }, 'violation alerts delivered to Alertmanager again');
    this.failing = false;
    this.delivered(batch);
    return 'delivered';
  }

  private delivered(batch: AlertState[]): void {
    for (const state of ['firing', 'resolved'] as const) {
      const n = batch.filter((a) => a.state === state).length;
      if (n > 0) this.options.metrics.sent.inc({ alertmanager: this.name, state }, n);
    }
    const onDelivered = this.options.onDelivered;
    if (!onDelivered) return;
    const alerts = batch.map(({ incident, state }): DeliveredAlert => ({
      incidentId: incident.id,
      cluster: incident.cluster,
      kind: incident.kind,
      state,
      violations: incident.violations,
      lastComputedAt: incident.lastComputedAt,
    }));
    try {
      onDelivered({ alertmanager: this.name, atMs: this.options.now(), alerts });
    } catch (error) {
      this.options.log.warn({ err: (error as Error).message }, 'onDelivered listener threw; ignored');
    }
  }
}
