import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** What the violation push exposes on /metrics; the caller merges `registry` into its own. */
export interface ViolationAlertMetrics {
  registry: Registry;
  pushEnabled: Gauge;
  sent: Counter<'alertmanager' | 'state'>;
  undelivered: Counter<'alertmanager'>;
  pending: Gauge<'alertmanager'>;
  active: Gauge;
  untracked: Gauge;
  pushSeconds: Histogram<'alertmanager'>;
  lookupFailures: Counter;
  lookupSeconds: Histogram;
}

export function createViolationAlertMetrics(registry = new Registry()): ViolationAlertMetrics {
  const registers = [registry];
  return {
    registry,
    pushEnabled: new Gauge({
      name: 'holdscope_violation_push_enabled',
      help: 'Whether holdscope pushes violation alerts to Alertmanager itself (1) or not (0): the fallback rules fire only when not 1',
      registers,
    }),
    sent: new Counter({
      name: 'holdscope_violation_alerts_sent_total',
      help: 'Violation alerts an Alertmanager accepted, by state (firing, resolved)',
      labelNames: ['alertmanager', 'state'],
      registers,
    }),
    undelivered: new Counter({
      name: 'holdscope_violation_alerts_undelivered_total',
      help: 'Violation alerts in POSTs to an Alertmanager that failed (each failed try counts its alerts; they are tried again)',
      labelNames: ['alertmanager'],
      registers,
    }),
    pending: new Gauge({
      name: 'holdscope_violation_alerts_pending',
      help: 'Violation alerts waiting to be sent to an Alertmanager (retried after a failure)',
      labelNames: ['alertmanager'],
      registers,
    }),
    active: new Gauge({
      name: 'holdscope_violation_alerts_active',
      help: 'Violation incidents currently firing',
      registers,
    }),
    untracked: new Gauge({
      name: 'holdscope_violation_incidents_untracked',
      help: 'Violation incidents of the last lookup beyond the bound of tracked incidents: no alert is sent for them',
      registers,
    }),
    // Brackets the 2 s from a stored record to Alertmanager's answer, and the 5 s POST timeout.
    pushSeconds: new Histogram({
      name: 'holdscope_violation_alert_push_seconds',
      help: 'Time of one POST of violation alerts to an Alertmanager, successful or not',
      labelNames: ['alertmanager'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
      registers,
    }),
    // A lookup stands between a stored record and its alert: with the POST, it is the push's share of the 2 s.
    lookupSeconds: new Histogram({
      name: 'holdscope_violation_lookup_seconds',
      help: 'Time of one lookup of the current violation incidents (a read of the flagged records), successful or not',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
      registers,
    }),
    lookupFailures: new Counter({
      name: 'holdscope_violation_lookup_failures_total',
      help: 'Lookups of the current violation incidents that failed (ClickHouse unavailable, reads busy)',
      registers,
    }),
  };
}
