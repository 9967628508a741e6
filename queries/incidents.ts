// Incidents: the per-lifecycle safety violations of a range grouped by what they share, so the on-call reads one line
// per culprit rather than one per request. The page lists them first and the violation alerts are these same groups:
// an alert's labels are an incident's key, and its link lands on the incident.
import { createHash } from 'node:crypto';
import type { ClickHouseClient } from '../common/index.ts';
import type { FlagWindow, Severity } from './flag-model.ts';
import type { ReadLimits } from './read-window.ts';
import { runQuery } from './runner.ts';

/** The kinds a lifecycle keeps once raised (incidents.sql); each is a bug to page on, not a trend to watch. */
export const VIOLATION_KINDS = [
  'late_write',
  'unsafe_release',
  'ack_after_failed_send',
  'stale_ack_consumed',
  'admission_leak',
  'checksum_mismatch',
] as const;
export type ViolationKind = (typeof VIOLATION_KINDS)[number];

/** The alert each kind raises: one name per kind, so a silence or a route can pick one. */
export const VIOLATION_ALERT_NAMES: Record<ViolationKind, string> = {
  late_write: 'HoldscopeLateWrite',
  unsafe_release: 'HoldscopeUnsafeRelease',
  ack_after_failed_send: 'HoldscopeAckAfterFailedSend',
  stale_ack_consumed: 'HoldscopeStaleAckConsumed',
  admission_leak: 'HoldscopeAdmissionLeak',
  checksum_mismatch: 'HoldscopeChecksumMismatch',
};

const KIND_TEXT: Record<ViolationKind, string> = {
  late_write: 'late write(s) onto released pages',
  unsafe_release: 'release(s) by timeout with writes unaccounted for',
  ack_after_failed_send: 'drain ack(s) sent after a failed send',
  stale_ack_consumed: 'ack(s) of an earlier generation counted',
  admission_leak: 'transfer(s) after an admission rejection',
  checksum_mismatch: 'PD checksum mismatch(es) at handoff',
};

/** What the violations of an incident share: the engines, their versions and the transfer backend. */
export interface Culprit {
  decode_engine: string;
  decode_version: string;
  /** The prefill engines of the lifecycles, comma-separated (one, unless a request was served by several). */
  prefill_engine: string;
  prefill_version: string;
  backend: string;
}

export interface Incident {
  /** Stable for the same cluster, kind and culprit: the page's anchor (`#incident-ID`) and the alerts' key. */
  id: string;
  cluster: string;
  kind: ViolationKind;
  severity: Severity;
  culprit: Culprit;
  violations: number;
  /** The earliest and latest last span of its lifecycles (ISO 8601). */
  firstSeen: string;
  lastSeen: string;
  /** When the newest of its records was stored: it moves whenever one of them is stored again. */
  lastComputedAt: string;
  /** The most recent requests, newest first. */
  examples: { request_id: string; generation: number }[];
  /** Violations per bucket of `bucketSeconds` from the range's start, by their lifecycle's last span. */
  sparkline: { bucketSeconds: number; counts: number[] };
  /** One sentence naming the count, the kind and the culprit. */
  summary: string;
}

export interface IncidentReport {
  /** Most recently seen first. */
  incidents: Incident[];
  /** How many incidents the range has, listed or not. */
  total: number;
}

export interface IncidentOptions {
  /** Sparkline bucket width; by default the range in about 60 buckets, at least 10 s each. */
  bucketSeconds?: number;
  /** Requests listed per incident (default 5). */
  examples?: number;
  /** Incidents listed, most recent first (default 200). */
  maxIncidents?: number;
  /** Only lifecycles that began up to this long before the range (default: any): bounds a lookup made every second. */
  maxLifecycleHours?: number;
  limits?: ReadLimits;
  signal?: AbortSignal;
}

interface IncidentRow extends Culprit {
  cluster: string;
  kind: ViolationKind;
  violations: number;
  first_seen: string;
  last_seen: string;
  last_computed_at: string;
  examples: [string, number][];
  spark_buckets: number[];
  spark_counts: number[];
  total_incidents: number;
}

const SPARKLINE_BUCKETS = 60;

/** An incident's id from its key: a hash, so that any engine name makes a safe anchor and label value. */
export function incidentId(cluster: string, kind: string, culprit: Culprit): string {
  const key = [
    cluster,
    kind,
    culprit.decode_engine,
    culprit.decode_version,
    culprit.prefill_engine,
    culprit.prefill_version,
    culprit.backend,
  ];
  return createHash('sha256').update(JSON.stringify(key)).digest('hex').slice(0, 16);
}

const named = (what: string, value: string) => value || `unknown ${what}`;

/** "decode decode-1 (sglang-0.5.4), prefill prefill-0 (sglang-0.5.3), backend mooncake". */
export function describeCulprit(c: Culprit): string {
  const version = (v: string) => (v ? ` (${v})` : '');
  return (
    `decode ${named('engine', c.decode_engine)}${version(c.decode_version)}, ` +
    `prefill ${named('engine', c.prefill_engine)}${version(c.prefill_version)}, backend ${named('backend', c.backend)}`
  );
}

function describeIncident(kind: ViolationKind, violations: number, cluster: string, culprit: Culprit): string {
  return `${violations} ${KIND_TEXT[kind]} in cluster ${cluster}: ${describeCulprit(culprit)}`;
}

function sparklineOf(row: IncidentRow, bucketSeconds: number, buckets: number): Incident['sparkline'] {
  const counts = new Array<number>(buckets).fill(0);
  row.spark_buckets.forEach((bucket, i) => {
    // A lifecycle active in the range may end after it: its violation counts in the last bucket.
    const at = Math.min(buckets - 1, Math.max(0, Number(bucket)));
    counts[at] = (counts[at] ?? 0) + Number(row.spark_counts[i] ?? 0);
  });
  return { bucketSeconds, counts };
}

/** The incidents of a range, most recently seen first. */
export async function listIncidents(
  client: ClickHouseClient,
  database: string,
  window: FlagWindow,
  options: IncidentOptions = {},
): Promise<IncidentReport> {
  const rangeSeconds = Math.max(1, (Date.parse(window.to) - Date.parse(window.from)) / 1000);
  const bucketSeconds = options.bucketSeconds ?? Math.max(10, Math.ceil(rangeSeconds / SPARKLINE_BUCKETS));
  const buckets = Math.max(1, Math.ceil(rangeSeconds / bucketSeconds));
  const rows = await runQuery<IncidentRow>(
    client,
    database,
    'incidents',
    {
      from: window.from,
      to: window.to,
      cluster: window.cluster ?? '',
      bucket_seconds: String(bucketSeconds),
      examples: String(options.examples ?? 5),
      max_incidents: String(options.maxIncidents ?? 200),
      max_lifecycle_hours: String(options.maxLifecycleHours ?? 0),
    },
    { limits: options.limits, signal: options.signal },
  );
  const incidents = rows.map((row): Incident => {
    const culprit: Culprit = {
      decode_engine: row.decode_engine,
      decode_version: row.decode_version,
      prefill_engine: row.prefill_engine,
      prefill_version: row.prefill_version,
      backend: row.backend,
    };
    const violations = Number(row.violations);
    return {
      id: incidentId(row.cluster, row.kind, culprit),
      cluster: row.cluster,
      kind: row.kind,
      severity: 'critical',
      culprit,
      violations,
      firstSeen: row.first_seen,
      lastSeen: row.last_seen,
      lastComputedAt: row.last_computed_at,
      examples: row.examples.map(([request_id, generation]) => ({ request_id, generation: Number(generation) })),
      sparkline: sparklineOf(row, bucketSeconds, buckets),
      summary: describeIncident(row.kind, violations, row.cluster, culprit),
    };
  });
  return { incidents, total: Number(rows[0]?.total_incidents ?? 0) };
}
