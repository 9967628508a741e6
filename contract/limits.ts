/**
 * What holdscope can store: the range of the ClickHouse column every contract value lands in
 * (pipeline/migrations/0001_spans_and_lifecycles.sql and the tables computed from it), and the time rules a
 * receiver applies on top. The validator checks each value against these, so a value out of range is a rejected
 * span naming its field, never a row ClickHouse refuses (a failed INSERT) or stores wrapped (2^40 as 0).
 */
import { intAtLeast, key, nonNegativeInt } from '../common/config.ts';
import { Attr, ResourceAttr } from './names.ts';

export const UINT32_MAX = 4_294_967_295;
export const INT32_MAX = 2_147_483_647;

/** An integer column's type and the largest value it holds that the contract accepts (all are at least 0). */
export interface IntColumn {
  type: 'UInt32' | 'Int32' | 'UInt64';
  max: number;
}

const UInt32: IntColumn = { type: 'UInt32', max: UINT32_MAX };
// Int32 holds negatives too, but the contract's integers are non-negative (-1 is the column's "no rank").
const Int32: IntColumn = { type: 'Int32', max: INT32_MAX };
// UInt64 holds more, but a JavaScript number is exact only up to 2^53-1, and a larger one arrives as a bigint.
const UInt64: IntColumn = { type: 'UInt64', max: Number.MAX_SAFE_INTEGER };

/**
 * The column each integer attribute (and each item of an integer array) is stored in. Not stored:
 * `pd.contract.version`, which must equal CONTRACT_VERSION anyway (its range is the safe integers).
 */
export const INT_COLUMNS: Readonly<Record<string, IntColumn>> = {
  [Attr.generation]: UInt32, // generation
  [Attr.ackGeneration]: UInt32, // ack_generation
  [ResourceAttr.kvCapacitySlots]: UInt32, // capacity_slots
  [Attr.rank]: Int32, // rank
  [Attr.chunkIndex]: Int32, // chunk_index
  [Attr.kvPages]: UInt32, // pages Array(UInt32)
  [Attr.kvSlots]: UInt32, // slots
  [Attr.transferBytes]: UInt64, // transfer_bytes
  [Attr.holdExpectedRanks]: UInt32, // expected_ranks Array(UInt32)
  [Attr.holdTimeoutMs]: UInt32, // hold_timeout_ms
  [Attr.drainChunksDropped]: UInt32, // chunks_dropped
  [Attr.drainInflight]: UInt32, // inflight
  [Attr.drainFailedSends]: UInt32, // failed_sends
  [Attr.timeoutMissingRanks]: UInt32, // missing_ranks Array(UInt32)
  [Attr.contractVersion]: UInt64,
};

/**
 * The latest span time holdscope can store, 2106-02-07T06:28:15.999999999Z: the end of ClickHouse's DateTime
 * (seconds in a UInt32). start_time and end_time are DateTime64(9, 'UTC'), whose range is 1900-01-01 to
 * 2262-04-11T23:47:16.854775807Z (Int64 nanoseconds; past it the INSERT fails with DECIMAL_OVERFLOW), but the
 * tables computed from them take DateTime values of the same times (toStartOfHour buckets, the hold minutes,
 * every TTL's toDateTime), and ClickHouse wraps those past 2106: a hold in 2200 was stored in the hold minute
 * 2063-11-24 17:31. The earliest time is the epoch's next nanosecond: a start must be greater than 0.
 */
export const MAX_TIME_NS = 4_294_967_295_999_999_999n;

/** How far ahead of the receiver's clock a span's times may be unless configured: 1 hour. */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 3_600_000;
/** Days spans and the records computed from them are kept unless configured (storage's TTL and the receiver's rule). */
export const DEFAULT_RETENTION_DAYS = 30;

/**
 * The time rule's configuration keys, declared once for every process that applies it (collector, pipeline, storage,
 * start), so that a receiver never accepts what storage would drop.
 */
export const spanTimeKeys = {
  /**
   * How far ahead of the receiving process's clock a PD span's start or end may be (ms): 1 hour, far more than
   * NTP-synchronised hosts drift, far less than a clock set to the wrong day. A span beyond it is rejected: stored,
   * it would sit past every window's end, and so would its lifecycle's records.
   */
  maxClockSkewMs: key(nonNegativeInt().default(DEFAULT_MAX_CLOCK_SKEW_MS), {
    help: "how far ahead of this process's clock a span's times may be",
    env: 'HOLDSCOPE_MAX_CLOCK_SKEW_MS',
    placeholder: 'ms',
  }),
  /** 30 days covers a month of postmortems. Spans that started earlier are rejected: storage's TTL would drop them. */
  retentionDays: key(intAtLeast(1).default(DEFAULT_RETENTION_DAYS), {
    help: 'days spans and lifecycles are kept; spans that started earlier are rejected',
    env: 'HOLDSCOPE_RETENTION_DAYS',
    placeholder: 'n',
  }),
};

const NS_PER_MS = 1_000_000n;
const MS_PER_DAY = 86_400_000;

/**
 * The times a receiver takes now, on top of what can be stored: nothing further ahead of its clock than the
 * senders' clocks can be off, nothing that started before the retention (storage would drop it, and a replay
 * of old spans should not move records already gone).
 */
export interface SpanTimeWindow {
  /** The receiver's clock, Unix nanoseconds. */
  nowNs: bigint;
  /** How far past `nowNs` a start or end may lie. */
  maxFutureSkewNs: bigint;
  /** The earliest start kept (inclusive). */
  oldestStartNs: bigint;
}

/** The window of a receiver at `nowMs` with this clock skew (ms) and retention (days). */
export function spanTimeWindow(
  nowMs: number,
  maxClockSkewMs: number = DEFAULT_MAX_CLOCK_SKEW_MS,
  retentionDays: number = DEFAULT_RETENTION_DAYS,
): SpanTimeWindow {
  const nowNs = BigInt(Math.floor(nowMs)) * NS_PER_MS;
  return {
    nowNs,
    maxFutureSkewNs: BigInt(Math.floor(maxClockSkewMs)) * NS_PER_MS,
    oldestStartNs: nowNs - BigInt(Math.floor(retentionDays * MS_PER_DAY)) * NS_PER_MS,
  };
}

/** Unix nanoseconds as ISO 8601 UTC with all nine digits, for reasons (any time from the epoch to 2^64 ns). */
export function isoNanos(ns: bigint): string {
  const seconds = ns / 1_000_000_000n;
  const fraction = (ns % 1_000_000_000n).toString().padStart(9, '0');
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19)}.${fraction}Z`;
}
