// The hold-timeout advice (`holdscope advise-timeout`, `/api/advice`): per pairing (prefill version, decode
// version, backend) and decode engine, the smallest hold timeout at which a write lands after release with
// probability below a target, from the measured time from ABORT to each hold's last write completion
// (advice_tails.sql), with its cost: KV slot-seconds per abort, and the share of the decode engine's capacity it would
// have pinned in the window's worst abort storm (the storms of queries/storms.ts, re-pinned here with every hold cut at
// the timeout). The statistics are queries/analysis (adviseTimeout); what they assume is docs/analysis.md.
import { InputError, type ClickHouseClient } from '../common/index.ts';
import { adviseTimeout, sortAscending, type TimeoutAdvice } from './analysis/index.ts';
import { judgePinnedRows, pinnedRowsByEngine, readStormSeries, type PinnedRow } from './distribution.ts';
import { flagThresholdsSchema, type FlagThresholds } from './flag-model.ts';
import { DEFAULT_READ_LIMITS, readWindow, type ReadLimits, type ReadWindow } from './read-window.ts';
import { runQuery, runQueryCapped, type ReadOptions } from './runner.ts';
import { STORM_WINDOW_MS } from './storms.ts';

/** The default target: a write landing after release in at most 1 in 10,000 aborts. */
export const DEFAULT_ADVICE_TARGET = 1e-4;
/** The window when none is given: six hours, enough holds for most pairings without spanning a day's load cycle. */
export const DEFAULT_ADVICE_WINDOW_MS = 6 * 3_600_000;
/**
 * Tails per group (advice_tails.sql's sample_size): above minimumEmpiricalSamples(1e-4) = 36,887, so the default
 * target gets an empirical answer when the data have it, and the read stays bounded (two samples of this many a group).
 */
export const ADVICE_SAMPLE_SIZE = 50_000;
/** Holds re-pinned for one engine's worst storm: more and the estimate is marked truncated (a lower bound). */
export const STORM_HOLDS_CAP = 500_000;

/** A target probability as text (CLI flag, query string): a number in (0, 0.5); above that a "tail" is the body. */
export function parseTarget(text: string | undefined): number {
  if (text === undefined || text === '') return DEFAULT_ADVICE_TARGET;
  const p = Number(text);
  if (!(Number.isFinite(p) && p > 0 && p < 0.5))
    throw new InputError(`target: expected a probability in (0, 0.5) such as 1e-4, got ${JSON.stringify(text)}`);
  return p;
}

/** The window of an advice: ISO times or relative to now (`-6h`, `now`); defaults to the six hours before now. */
export function adviceWindow(
  from: string | undefined,
  to: string | undefined,
  limits: Pick<ReadLimits, 'maxReadWindowMs'>,
  nowMs = Date.now(),
): ReadWindow {
  return readWindow(from, to, limits, { defaultMs: DEFAULT_ADVICE_WINDOW_MS, now: () => nowMs });
}

/** A row of advice_tails.sql. */
export interface AdviceTailRow {
  cluster: string;
  prefill_version: string;
  decode_version: string;
  backend: string;
  decode_engine: string;
  holds: number;
  open: number;
  drained: number;
  timeouts: number;
  without_evidence: number;
  unsafe_releases: number;
  with_evidence: number;
  timeout_common_ms: number;
  timeout_max_ms: number;
  capacity_slots: number;
  today_slot_seconds: number | null;
  tails_ms: number[];
  /** (release ms after ABORT or -1 while open, held slots, 1 when drained). */
  holds_sample: [number, number, number][];
}

/** A row of advice_storm_holds.sql. */
export interface StormHold {
  hold_start_ms: number;
  release_ms: number | null;
  resolution: string;
  held_slots: number;
}

/**
 * KV slot-seconds one abort pins at hold timeout `timeoutMs`, the mean over a sample of holds. A hold lasts until it
 * drains or until the timeout: min(hold duration, T) for a drained hold, T for one that timed out or is still open.
 * The approximation: a hold that timed out today is taken to lack its acks at T too, exact when T is below today's
 * timeout and an upper bound above it (a late ack would have drained it sooner); held slots are the hold's at ABORT.
 */
export function slotSecondsPerAbort(sample: readonly (readonly [number, number, number])[], timeoutMs: number): number | null {
  if (sample.length === 0 || !Number.isFinite(timeoutMs)) return null;
  let total = 0;
  for (const [holdMs, slots, drained] of sample)
    total += (slots * (drained === 1 && holdMs >= 0 ? Math.min(holdMs, timeoutMs) : timeoutMs)) / 1000;
  return total / sample.length;
}

/**
 * The peak KV slots pinned in the 10 s storm window starting at `windowStartMs`, each hold cut at `capMs` (Infinity:
 * as they were). Seconds as kv_pinned.sql counts them, so that uncut it gives kv_pinned's peak_pinned_slots: a hold
 * pins from the whole second after its start to the whole second of its end; an open hold ends at `nowMs`, at most a
 * day after its start. Cut: a drained hold ends at min(release, start + T), any other at start + T (the cost's
 * approximation, slotSecondsPerAbort).
 */
export function peakPinnedSlots(holds: readonly StormHold[], windowStartMs: number, capMs: number, nowMs: number): number {
  const first = Math.floor(windowStartMs / 1000);
  const seconds = STORM_WINDOW_MS / 1000;
  const level = new Float64Array(seconds);
  for (const h of holds) {
    const start = h.hold_start_ms;
    const actual = h.release_ms ?? Math.min(nowMs, start + 86_400_000);
    const end = !Number.isFinite(capMs) ? actual : h.resolution === 'drained' ? Math.min(actual, start + capMs) : start + capMs;
    const from = Math.max(Math.floor(start / 1000) + 1, first);
    const to = Math.min(Math.floor(end / 1000), first + seconds - 1);
    for (let s = from; s <= to; s++) level[s - first] = (level[s - first] as number) + h.held_slots;
  }
  return Math.max(0, ...level);
}

/** The worst storm of one engine: its storm window (queries/storms.ts) with the most aborts, the earliest of equals. */
export function worstStorm(
  rows: readonly PinnedRow[],
  fromMs: number,
  thresholds: FlagThresholds,
): { row: PinnedRow; t: number } | undefined {
  let worst: { row: PinnedRow; t: number } | undefined;
  for (const { window, storm } of judgePinnedRows(rows, fromMs, thresholds))
    if (storm && (!worst || window.aborts > Number(worst.row.aborts))) worst = { row: window.row, t: window.t };
  return worst;
}

/** What a timeout would have pinned in the engine's worst storm, beside what holds pinned there as they were. */
export interface StormCost {
  window_start: string;
  aborts: number;
  capacity_slots: number;
  peak_share_today: number;
  peak_share_at_advised: number | null;
  peak_share_at_upper: number | null;
  /** More holds than STORM_HOLDS_CAP started near the window: the shares are lower bounds. */
  truncated: boolean;
}

/** One group's advice: its key and counts as advice_tails.sql reads them, and what they advise. */
export interface HoldTimeoutAdvice extends Pick<
  AdviceTailRow,
  | 'cluster'
  | 'prefill_version'
  | 'decode_version'
  | 'backend'
  | 'decode_engine'
  | 'holds'
  | 'open'
  | 'drained'
  | 'timeouts'
  | 'without_evidence'
  | 'unsafe_releases'
> {
  /** Tails the advice was computed from (a uniform sample of the holds with evidence, at most ADVICE_SAMPLE_SIZE). */
  sampled: number;
  advice: TimeoutAdvice;
  summary: string;
  today: { timeout_common_ms: number; timeout_max_ms: number; slot_seconds_per_abort: number | null };
  cost: { slot_seconds_per_abort_at_advised: number | null; slot_seconds_per_abort_at_upper: number | null };
  storm: StormCost | null;
  notes: string[];
}

export interface AdviceReport {
  from: string;
  to: string;
  target: number;
  groups: HoldTimeoutAdvice[];
}

const round = (x: number, digits = 1) => Number(x.toFixed(digits));

/** The advice of one row of advice_tails.sql, without its storm (adviseHoldTimeouts adds it). */
export function groupAdvice(row: AdviceTailRow, target: number): HoldTimeoutAdvice {
  const tails = sortAscending(row.tails_ms.map(Number));
  const advice = adviseTimeout(tails, { targetProbability: target });
  const advised = advice.method === 'too-few' ? NaN : advice.timeoutMs;
  const upper = advice.method === 'too-few' ? NaN : advice.upperMs;
  const summary =
    advice.method === 'too-few'
      ? `too few holds: ${advice.n} with a measured tail (${advice.exceedances} above the 90th percentile, ${advice.minExceedances} needed for a tail fit)`
      : `${Math.ceil(advised)} ms (95% interval ${Math.floor(advice.lowerMs)}..${Math.ceil(upper)} ms, ${advice.method === 'empirical' ? 'empirical quantile' : 'fitted tail'} of ${advice.n} holds) against ${row.timeout_common_ms} ms in use`;
  return {
    cluster: row.cluster,
    prefill_version: row.prefill_version,
    decode_version: row.decode_version,
    backend: row.backend,
    decode_engine: row.decode_engine,
    holds: row.holds,
    open: row.open,
    drained: row.drained,
    timeouts: row.timeouts,
    without_evidence: row.without_evidence,
    unsafe_releases: row.unsafe_releases,
    sampled: tails.length,
    advice,
    summary,
    today: {
      timeout_common_ms: row.timeout_common_ms,
      timeout_max_ms: row.timeout_max_ms,
      slot_seconds_per_abort: row.today_slot_seconds === null ? null : round(row.today_slot_seconds, 3),
    },
    cost: {
      slot_seconds_per_abort_at_advised: nullableRound(slotSecondsPerAbort(row.holds_sample, advised)),
      slot_seconds_per_abort_at_upper: nullableRound(slotSecondsPerAbort(row.holds_sample, upper)),
    },
    storm: null,
    notes: adviceNotes(row, target),
  };
}

const nullableRound = (x: number | null) => (x === null ? null : round(x, 3));

/** What makes an advice untrustworthy that the numbers alone do not say. */
function adviceNotes(row: AdviceTailRow, target: number): string[] {
  const notes: string[] = [];
  const resolved = row.holds - row.open;
  if (resolved > 0 && row.without_evidence / resolved > target)
    notes.push(
      `${row.without_evidence} of ${resolved} resolved holds had a failed or timed-out write, more than the target share: they have no completion time, so no timeout is known to be safe for them (quarantine on timeout, or fix the transfers)`,
    );
  if (row.holds > 0 && row.open / row.holds > 0.01)
    notes.push(`${row.open} of ${row.holds} holds are still open: their tails are not in the sample, which may make the advice short`);
  if (row.timeout_common_ms !== row.timeout_max_ms)
    notes.push(`hold timeouts differ in the window (most common ${row.timeout_common_ms} ms, largest ${row.timeout_max_ms} ms)`);
  return notes;
}

/** The advice of a window, one entry per pairing and decode engine, each with its engine's worst storm re-pinned. */
export async function adviseHoldTimeouts(
  client: ClickHouseClient,
  database: string,
  window: ReadWindow & { cluster?: string },
  options: { target?: number; thresholds?: FlagThresholds; nowMs?: number } & ReadOptions = {},
): Promise<AdviceReport> {
  const target = options.target ?? DEFAULT_ADVICE_TARGET;
  const thresholds = options.thresholds ?? flagThresholdsSchema.parse({});
  const read: ReadOptions = { limits: options.limits ?? DEFAULT_READ_LIMITS, signal: options.signal };
  const params = { from: window.from, to: window.to, cluster: window.cluster ?? '' };
  // The storm series every other reader uses, judged by queries/storms.ts.
  const pinnedRead = readStormSeries(client, database, params, thresholds, read);
  // Marked handled at once: should the tails read fail first, this one's failure is not left unhandled.
  pinnedRead.catch(() => undefined);
  const rows = await runQuery<AdviceTailRow>(
    client,
    database,
    'advice_tails',
    { ...params, sample_size: String(ADVICE_SAMPLE_SIZE) },
    read,
  );
  // The tail fits (tens of ms of this process's CPU) run while ClickHouse still computes the storm series.
  const groups = rows.map((row) => groupAdvice(row, target));
  const pinned = await pinnedRead;
  // One read per decode engine, at once: each engine's groups are its own.
  await Promise.all(
    pinnedRowsByEngine(pinned).map(async (engineRows) => {
      const first = engineRows[0] as PinnedRow;
      const mine = groups.filter((g) => g.cluster === first.cluster && g.decode_engine === first.decode_engine);
      const worst = worstStorm(engineRows, window.fromMs, thresholds);
      if (mine.length > 0 && worst) await addStormCost(client, database, mine, worst, options.nowMs ?? Date.now(), read);
    }),
  );
  return { from: window.from, to: window.to, target, groups };
}

/**
 * Re-pins the engine's worst storm window with each hold cut at each group's advised timeout (and its upper bound).
 * The timeout is the decode engine's setting, so every hold of the engine is cut by it, whichever pairing it came
 * from. The holds read are those that can reach the window: started up to the longest cut (or today's largest
 * timeout, for the uncut peak) before it.
 */
async function addStormCost(
  client: ClickHouseClient,
  database: string,
  groups: HoldTimeoutAdvice[],
  worst: { row: PinnedRow; t: number },
  nowMs: number,
  read: ReadOptions,
): Promise<void> {
  const limits = read.limits ?? DEFAULT_READ_LIMITS;
  const caps = groups.flatMap((g) => (g.advice.method === 'too-few' ? [] : [g.advice.timeoutMs, g.advice.upperMs]));
  const reach = Math.min(limits.maxReadWindowMs - STORM_WINDOW_MS, Math.max(...caps, ...groups.map((g) => g.today.timeout_max_ms)));
  const params = {
    from: new Date(worst.t - reach).toISOString(),
    to: new Date(worst.t + STORM_WINDOW_MS).toISOString(),
    cluster: worst.row.cluster,
    decode_engine: worst.row.decode_engine,
  };
  const { rows: holds, truncated } = await runQueryCapped<StormHold>(client, database, 'advice_storm_holds', params, STORM_HOLDS_CAP, read);
  const capacity = Number(worst.row.capacity_slots);
  const share = (capMs: number) =>
    capacity > 0 && Number.isFinite(capMs) ? round(peakPinnedSlots(holds, worst.t, capMs, nowMs) / capacity, 4) : null;
  for (const g of groups) {
    g.storm = {
      window_start: new Date(worst.t).toISOString(),
      aborts: Number(worst.row.aborts),
      capacity_slots: capacity,
      peak_share_today: capacity > 0 ? round(Number(worst.row.peak_pinned_slots) / capacity, 4) : 0,
      peak_share_at_advised: g.advice.method === 'too-few' ? null : share(g.advice.timeoutMs),
      peak_share_at_upper: g.advice.method === 'too-few' ? null : share(g.advice.upperMs),
      truncated,
    };
  }
}
