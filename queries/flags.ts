import type { ClickHouseClient } from '../common/index.ts';
import { distributionFlags } from './distribution.ts';
import { flagThresholdsSchema, type Flag, type FlagThresholds, type FlagWindow, type Severity } from './flag-model.ts';
import { describeCulprit, incidentId, type Culprit } from './incidents.ts';
import type { ReadLimits } from './read-window.ts';
import { runQuery } from './runner.ts';

/** The kinds flags_lifecycle.sql returns; a kind added there must get its own case in lifecycleFlag. */
type LifecycleFlagKind =
  'late_write' | 'unsafe_release' | 'ack_after_failed_send' | 'stale_ack_consumed' | 'admission_leak' | 'checksum_mismatch' | 'open_hold';

interface LifecycleFlagRow {
  kind: LifecycleFlagKind;
  kind_total: number;
  cluster: string;
  request_id: string;
  generation: number;
  decode_engine: string;
  decode_version: string;
  /** The prefill engines and their versions, comma-separated, as an incident's culprit names them. */
  prefill_engine: string;
  prefill_version: string;
  backend: string;
  hold_start: string | null;
  hold_timeout_ms: number;
  release_at: string | null;
  release_reason: string;
  resolution: string;
  late_writes: number;
  chunks_failed: number;
  chunks_timeout: number;
  in_flight_at_release: number;
  acks_after_failed_send: number;
  stale_acks_accepted: number;
  admission_outcome: string;
  admission_reason: string;
  chunks_launched: number;
  handoff_at: string | null;
  checksum_outcome: string;
  open_ms: number;
}

interface VictimRow {
  cluster: string;
  request_id: string;
  generation: number;
  rank: number;
  chunk_index: number;
  landed_at: string;
  decode_engine: string;
  page: number;
  victim_request_id: string;
  victim_generation: number;
}

const lifecycleKey = (r: { cluster: string; request_id: string; generation: number }) =>
  JSON.stringify([r.cluster, r.request_id, r.generation]);

function lateWriteEvidence(victims: VictimRow[]) {
  const pages = [...new Set(victims.map((v) => v.page))].sort((a, b) => a - b);
  const byVictim = new Map<string, { request_id: string; generation: number; pages: number[] }>();
  for (const v of victims) {
    if (!v.victim_request_id) continue;
    const key = JSON.stringify([v.victim_request_id, v.victim_generation]);
    const entry = byVictim.get(key) ?? { request_id: v.victim_request_id, generation: v.victim_generation, pages: [] };
    if (!entry.pages.includes(v.page)) entry.pages.push(v.page);
    byVictim.set(key, entry);
  }
  const writes = new Map<string, { rank: number; chunk_index: number; landed_at: string }>();
  for (const v of victims) writes.set(`${v.rank}/${v.chunk_index}`, { rank: v.rank, chunk_index: v.chunk_index, landed_at: v.landed_at });
  return { pages, victims: [...byVictim.values()], writes: [...writes.values()] };
}

const culpritOf = (row: LifecycleFlagRow): Culprit => ({
  decode_engine: row.decode_engine,
  decode_version: row.decode_version,
  prefill_engine: row.prefill_engine,
  prefill_version: row.prefill_version,
  backend: row.backend,
});

/** "request R generation G (decode decode-1 (v), prefill prefill-0 (v), backend B)": who, and on which engines. */
function describe(row: LifecycleFlagRow, culprit: Culprit): string {
  return `request ${row.request_id} generation ${row.generation} (${describeCulprit(culprit)})`;
}

/** Builds the flag of one lifecycle row: severity, the sentence an on-call acts on, and its numbers. */
// eslint-disable-next-line max-lines-per-function -- one case per lifecycle flag kind, each with its summary
function lifecycleFlag(row: LifecycleFlagRow, victims: VictimRow[]): Flag {
  const culprit = culpritOf(row);
  const base = {
    cluster: row.cluster,
    request_id: row.request_id,
    generation: row.generation,
    // The engines, versions and backend as fields too, for a filter or a script, not only in the sentence.
    scope: { ...culprit },
    ...(row.kind === 'open_hold' ? {} : { incident: incidentId(row.cluster, row.kind, culprit) }),
  };
  const who = describe(row, culprit);
  switch (row.kind) {
    case 'late_write': {
      const evidence = lateWriteEvidence(victims);
      const owners = evidence.victims.map((v) => `${v.request_id}/${v.generation}`).join(', ');
      return {
        ...base,
        kind: row.kind,
        severity: 'critical',
        summary:
          `${row.late_writes} write(s) of ${who} landed after its pages were released (${row.release_reason}); ` +
          (owners
            ? `pages then owned by ${owners} were overwritten: treat their output as corrupt and raise the hold timeout above the transfer tail.`
            : // Said of what is stored: the owner's allocation may come in a later batch, or from another pipeline.
              'no allocation stored so far owned those pages when the writes landed (free then, or their owner is not stored yet): ' +
              'raise the hold timeout above the transfer tail.'),
        evidence: { release_at: row.release_at, release_reason: row.release_reason, late_writes: row.late_writes, ...evidence },
      };
    }
    case 'unsafe_release':
      return {
        ...base,
        kind: row.kind,
        severity: 'critical',
        summary: `${who} was released by timeout while ${row.in_flight_at_release + row.chunks_failed + row.chunks_timeout} write(s) had no completion evidence; its pages may still be written: lengthen the hold or quarantine on timeout.`,
        evidence: {
          hold_start: row.hold_start,
          release_at: row.release_at,
          hold_timeout_ms: row.hold_timeout_ms,
          in_flight_at_release: row.in_flight_at_release,
          chunks_failed: row.chunks_failed,
          chunks_timeout: row.chunks_timeout,
        },
      };
    case 'ack_after_failed_send':
      return {
        ...base,
        kind: row.kind,
        severity: 'critical',
        summary: `A prefill rank acknowledged the drain of ${who} despite failed sends, so decode trusted writes that may still land: the prefill engine must withhold its ack after a failed send.`,
        evidence: {
          acks_after_failed_send: row.acks_after_failed_send,
          chunks_failed: row.chunks_failed,
          chunks_timeout: row.chunks_timeout,
          release_reason: row.release_reason,
        },
      };
    case 'stale_ack_consumed':
      return {
        ...base,
        kind: row.kind,
        severity: 'critical',
        summary: `Decode counted ${row.stale_acks_accepted} ack(s) of an earlier generation for ${who}, so its hold may have ended before this generation drained: check the generation check in ack handling.`,
        evidence: { stale_acks_accepted: row.stale_acks_accepted, release_reason: row.release_reason, release_at: row.release_at },
      };
    case 'admission_leak':
      return {
        ...base,
        kind: row.kind,
        severity: 'critical',
        summary: `${who} was rejected at admission yet ${row.handoff_at ? 'reached handoff' : 'received KV transfers'}: decode may read pages this request never populated; admission must stop the transition.`,
        evidence: { admission_reason: row.admission_reason, chunks_launched: row.chunks_launched, handoff_at: row.handoff_at },
      };
    case 'checksum_mismatch':
      return {
        ...base,
        kind: row.kind,
        // Corrupt output served to a user: a violation to page on, as the other kept kinds.
        severity: 'critical',
        summary: `The PD checksum of ${who} failed at handoff: its KV was corrupted in transit or by another request's late write; look for late_write flags naming it.`,
        evidence: { checksum_outcome: row.checksum_outcome, release_reason: row.release_reason },
      };
    case 'open_hold':
      return {
        ...base,
        kind: row.kind,
        severity: 'warning',
        summary: `The hold of ${who} has been open ${Math.round(row.open_ms / 1000)} s, past its ${Math.round(row.hold_timeout_ms / 1000)} s timeout; its KV slots stay pinned: find the missing ranks' acks or release it.`,
        evidence: { hold_start: row.hold_start, hold_timeout_ms: row.hold_timeout_ms, open_ms: row.open_ms },
      };
    default: {
      // Not the open-hold summary for a kind nobody wrote one for: a new kind in the SQL fails here, loudly.
      const unknown: never = row.kind;
      throw new Error(`flags_lifecycle returned a flag kind with no summary: ${String(unknown)}`);
    }
  }
}

const SEVERITY_ORDER: Record<Severity, number> = { critical: 0, warning: 1, info: 2 };

/** Lifecycle flags listed per kind and cluster by default: the most recent; the totals count them all. */
export const DEFAULT_FLAG_LIMIT_PER_KIND = 50;

/** How many flags of a kind a cluster has in the range, listed or not. */
export interface FlagTotal {
  cluster: string;
  kind: string;
  severity: Severity;
  count: number;
}

export interface FlagReport {
  /** Most severe first; per-lifecycle kinds hold at most `limitPerKind` flags per cluster, the most recent. */
  flags: Flag[];
  totals: FlagTotal[];
  limitPerKind: number;
}

/** The flags of a time range, most severe first, and how many of each kind there are. */
export async function computeFlags(
  client: ClickHouseClient,
  database: string,
  window: FlagWindow,
  thresholds: FlagThresholds = flagThresholdsSchema.parse({}),
  options: { limitPerKind?: number; limits?: ReadLimits } = {},
): Promise<FlagReport> {
  const limitPerKind = options.limitPerKind ?? DEFAULT_FLAG_LIMIT_PER_KIND;
  const params = { from: window.from, to: window.to, cluster: window.cluster ?? '' };
  // One query refused or failed fails the report: the others still waiting for a turn leave the queue then.
  const siblings = new AbortController();
  const read = { limits: options.limits, signal: siblings.signal };
  const [rows, victims, distribution] = await Promise.all([
    runQuery<LifecycleFlagRow>(
      client,
      database,
      'flags_lifecycle',
      { ...params, open_hold_grace_ms: String(thresholds.openHoldGraceMs), limit_per_kind: String(limitPerKind) },
      read,
    ),
    // Victims only of the late writes listed (the same most recent ones): the as-of join over every late write of a
    // storm is what costs.
    runQuery<VictimRow>(client, database, 'late_write_victims', { ...params, writers_per_cluster: String(limitPerKind) }, read),
    distributionFlags(client, database, window, thresholds, read),
  ]).catch((error: unknown) => {
    siblings.abort(error);
    throw error;
  });
  const victimsOf = new Map<string, VictimRow[]>();
  for (const v of victims) {
    const key = lifecycleKey(v);
    const list = victimsOf.get(key);
    if (list) list.push(v);
    else victimsOf.set(key, [v]);
  }
  const flags = [
    ...rows.map((row) => lifecycleFlag(row, row.kind === 'late_write' ? (victimsOf.get(lifecycleKey(row)) ?? []) : [])),
    ...distribution,
  ];
  // Lifecycle kinds count every flag of the range (kind_total); distribution flags are all listed.
  const kindTotal = new Map(rows.map((row) => [JSON.stringify([row.cluster, row.kind]), Number(row.kind_total)]));
  const totals = new Map<string, FlagTotal>();
  for (const flag of flags) {
    const key = JSON.stringify([flag.cluster, flag.kind]);
    const total = totals.get(key) ?? { cluster: flag.cluster, kind: flag.kind, severity: flag.severity, count: kindTotal.get(key) ?? 0 };
    if (!kindTotal.has(key)) total.count++;
    totals.set(key, total);
  }
  return {
    flags: flags.sort((a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || a.kind.localeCompare(b.kind)),
    totals: [...totals.values()].sort(
      (a, b) =>
        SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || a.kind.localeCompare(b.kind) || a.cluster.localeCompare(b.cluster),
    ),
    limitPerKind,
  };
}
