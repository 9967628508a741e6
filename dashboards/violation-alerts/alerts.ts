// What one incident looks like to Alertmanager: its labels are the incident's key (so a silence or a route can pick a
// kind, an engine, a version or a backend), its annotations say how many and link, absolutely, to the runbook and to
// the incident on the page.
import { VIOLATION_ALERT_NAMES, type Incident } from '../../queries/index.ts';

/** An alert of Alertmanager's API v2 (POST /api/v2/alerts takes an array of these). */
export interface AlertmanagerAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt: string;
  generatorURL: string;
}

/** An incident's alert as the notifier last decided it. */
export interface AlertState {
  incident: Incident;
  state: 'firing' | 'resolved';
  startsAtMs: number;
  /** When it was resolved; firing alerts end `4 x resend` after each send instead. */
  resolvedAtMs?: number;
}

export interface AlertLinks {
  /** The pages' base URL, without a trailing slash (dashboards/config.ts externalUrl). */
  externalUrl: string;
}

/** Margin around an incident's first and last violation in its link, so that the page shows them with context. */
const LINK_MARGIN_MS = 60_000;

/** Alertmanager drops a label with an empty value, and a route or silence on it would then never match. */
const labelValue = (value: string) => (value === '' ? 'unknown' : value);

export function alertLabels(incident: Incident): Record<string, string> {
  const c = incident.culprit;
  return {
    alertname: VIOLATION_ALERT_NAMES[incident.kind],
    severity: incident.severity,
    cluster: labelValue(incident.cluster),
    kind: incident.kind,
    decode_engine: labelValue(c.decode_engine),
    decode_version: labelValue(c.decode_version),
    prefill_engine: labelValue(c.prefill_engine),
    prefill_version: labelValue(c.prefill_version),
    backend: labelValue(c.backend),
  };
}

/** The incident on the page: its range with a minute either side, its cluster, and its anchor. */
export function incidentUrl(links: AlertLinks, incident: Incident): string {
  const query = new URLSearchParams({
    from: new Date(Date.parse(incident.firstSeen) - LINK_MARGIN_MS).toISOString(),
    to: new Date(Date.parse(incident.lastSeen) + LINK_MARGIN_MS).toISOString(),
    cluster: incident.cluster,
  });
  return `${links.externalUrl}/?${query.toString()}#incident-${incident.id}`;
}

export const runbookUrl = (links: AlertLinks, incident: Incident) =>
  `${links.externalUrl}/runbooks#${VIOLATION_ALERT_NAMES[incident.kind].toLowerCase()}`;

function description(incident: Incident): string {
  const examples = incident.examples.map((e) => `${e.request_id} (generation ${e.generation})`).join(', ');
  return (
    `${incident.violations} violation(s) from ${incident.firstSeen} to ${incident.lastSeen}` +
    (examples ? `; latest requests: ${examples}` : '')
  );
}

/**
 * The alert to send at `nowMs`. A firing alert ends four resends ahead, as Prometheus sends them: Alertmanager keeps it
 * through three lost sends and lets it expire once holdscope stops sending.
 */
export function toAlertmanagerAlert(alert: AlertState, nowMs: number, links: AlertLinks & { resendMs: number }): AlertmanagerAlert {
  const url = incidentUrl(links, alert.incident);
  const endsAtMs = alert.state === 'resolved' ? (alert.resolvedAtMs ?? nowMs) : nowMs + 4 * links.resendMs;
  return {
    labels: alertLabels(alert.incident),
    annotations: {
      summary: alert.incident.summary,
      description: description(alert.incident),
      runbook_url: runbookUrl(links, alert.incident),
      incident_url: url,
    },
    startsAt: new Date(alert.startsAtMs).toISOString(),
    endsAt: new Date(Math.max(endsAtMs, alert.startsAtMs)).toISOString(),
    generatorURL: url,
  };
}
