// What a flag is and what decides one: the types and thresholds every detection (flags.ts, distribution.ts) shares.
import { z } from 'zod';
import { parseConfig } from '../common/config.ts';
import { ConfigError } from '../common/errors.ts';

export type Severity = 'critical' | 'warning' | 'info';

/** One finding for the on-call: about a lifecycle (request_id, generation) or a distribution (scope, value...). */
export interface Flag {
  kind: string;
  severity: Severity;
  summary: string;
  cluster: string;
  evidence: Record<string, unknown>;
  request_id?: string;
  generation?: number;
  scope?: Record<string, string>;
  value?: number;
  threshold?: number;
  sample_size?: number;
  /** The incident a lifecycle violation belongs to (queries/incidents.ts: the page's `#incident-ID`, its alert's key). */
  incident?: string;
}

/** Detection thresholds, each with its default documented where it is declared. */
export const flagThresholdsSchema = z.object({
  /** A hold may stay open this long past its timeout before open_hold fires (ms). */
  openHoldGraceMs: z.coerce.number().int().min(0).default(5000),
  /** timeout_heavy: the 95% Wilson lower bound of the timeout share must exceed this. */
  timeoutHeavyShare: z.coerce.number().min(0).max(1).default(0.05),
  /** timeout_heavy: fewest resolved holds in a scope before it is judged. */
  timeoutHeavyMinHolds: z.coerce.number().int().min(1).default(20),
  /** pairing_incompatible: timeout share at or above which a pairing "never drains". */
  pairingTimeoutShare: z.coerce.number().min(0).max(1).default(0.95),
  pairingMinHolds: z.coerce.number().int().min(1).default(20),
  /** long_transfer_tail: p99 tail at or above this fraction of the hold timeout. */
  longTailFractionOfTimeout: z.coerce.number().min(0).default(0.5),
  longTailMinHolds: z.coerce.number().int().min(1).default(20),
  /** kv_capacity_exhaustion: a storm is a 10 s window with at least this many times the trailing median of aborts... */
  stormMultiplier: z.coerce.number().min(1).default(3),
  /** ...over this many previous 10 s windows (5 minutes)... */
  stormTrailingWindows: z.coerce.number().int().min(1).default(30),
  /** ...and at least this many aborts, so a quiet engine's first few aborts are no storm. */
  stormMinAborts: z.coerce.number().int().min(1).default(5),
  /**
   * kv_capacity_exhaustion: whole 10 s windows of an engine's own data before its windows are judged (queries/storms.ts).
   * A minute: the median of six windows is not moved by one odd window (the partial first one is left out anyway),
   * and an engine deployed into a storm is judged a minute later rather than after the full trailing span.
   */
  stormWarmUpWindows: z.coerce.number().int().min(1).default(6),
  /** kv_capacity_exhaustion: share of the engine's capacity pinned by holds. */
  pinnedCapacityShare: z.coerce.number().min(0).max(1).default(0.2),
  /**
   * Share of a decode engine's KV capacity pinned by holds that is critical with or without an abort storm
   * (holdscope_kv_pinned_fraction, the KvCapacityExhaustion alert): most of the KV held means new requests queue
   * whatever made the holds pile up (a steady rate of lost acks under a long timeout does it with no storm). 0.8 leaves
   * the engine a fifth of its pages for the requests it is decoding and admitting, and sits far above
   * pinnedCapacityShare, the share that is news only during a storm.
   */
  pinnedCapacityCriticalShare: z.coerce.number().min(0).max(1).default(0.8),
});
export type FlagThresholds = z.output<typeof flagThresholdsSchema>;

/**
 * Thresholds from HOLDSCOPE_FLAG_THRESHOLDS, a JSON object of the keys above (e.g. `{"timeoutHeavyShare":0.1}`),
 * validated at start-up: a bad key or value stops the process with a message naming it.
 */
export function loadFlagThresholds(env: NodeJS.ProcessEnv = process.env): FlagThresholds {
  const text = env.HOLDSCOPE_FLAG_THRESHOLDS;
  if (!text) return flagThresholdsSchema.parse({});
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new ConfigError(`HOLDSCOPE_FLAG_THRESHOLDS: expected a JSON object, got ${JSON.stringify(text.slice(0, 60))}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new ConfigError('HOLDSCOPE_FLAG_THRESHOLDS: expected a JSON object');
  const unknown = Object.keys(raw).filter((k) => !(k in flagThresholdsSchema.shape));
  if (unknown.length > 0)
    throw new ConfigError(
      `HOLDSCOPE_FLAG_THRESHOLDS: unknown key(s) ${unknown.join(', ')}; known: ${Object.keys(flagThresholdsSchema.shape).join(', ')}`,
    );
  return parseConfig(flagThresholdsSchema, raw as Record<string, unknown>, (key) => `HOLDSCOPE_FLAG_THRESHOLDS.${key}`);
}

export interface FlagWindow {
  from: string;
  to: string;
  cluster?: string;
}
