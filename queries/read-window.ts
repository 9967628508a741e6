// The one home of the read window rule and the read limits: every read path (the read API, the pages' charts, the
// /metrics gauges, `holdscope query`) takes its from/to through here, and every named query runs under these limits
// (queries/runner.ts), so no request can make holdscope scan, hold or render more than the configuration allows.
import { z } from 'zod';
import { intAtLeast, key } from '../common/config.ts';
import { InputError } from '../common/index.ts';

const SECOND_MS = 1000;
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
const MIB = 2 ** 20;

/**
 * The limits of every read. Keys are named for the flags and variables they become (`--max-read-window-ms`,
 * HOLDSCOPE_MAX_READ_WINDOW_MS, ...).
 */
export const readLimitsSchema = z.object({
  /**
   * The widest from..to a read may cover (ms); wider is a 400 naming it. @default 7 days: the on-call page offers up to
   * 24 hours, and an incident reviewed from the page (a weekend's storms) fits in a week; a wider postmortem is
   * `holdscope query`'s, which has its own bound (`queryReadLimitsSchema`). The cost of a read follows the lifecycles in
   * its window (docs/operations.md: 0.7 s for an hour of 875,000 lifecycles), so this bounds what a read can ask for,
   * and `maxReadSeconds` what it may cost.
   */
  maxReadWindowMs: key(intAtLeast(SECOND_MS).default(7 * DAY_MS), {
    help: 'widest from..to a read may cover (the read API, pages, charts)',
    env: 'HOLDSCOPE_MAX_READ_WINDOW_MS',
    placeholder: 'ms',
  }),
  /**
   * ClickHouse's max_execution_time of each read query (s); a query stopped by it answers 400 naming it. @default 30:
   * under the ClickHouse client's 60 s request timeout, so the answer is this limit's, not a dropped socket. On embedded
   * ClickHouse a read delays the pipeline's record refresh by up to this much (its parameterized queries run one at a
   * time, docs/operations.md), so `holdscope start` acknowledges spans that much later at worst.
   */
  maxReadSeconds: key(intAtLeast(1).default(30), {
    help: 'ClickHouse max_execution_time of each read query',
    env: 'HOLDSCOPE_MAX_READ_SECONDS',
    placeholder: 's',
  }),
  /**
   * ClickHouse's max_memory_usage of each read query (bytes); a query stopped by it answers 400 naming it. @default
   * 1 GiB: each query of a week-wide /api/flags over the fault test's 100,000 lifecycles (test/faults/read-flood.test.ts)
   * ran within 64 MiB (late_write_victims, the largest), which leaves room for much busier stores; with
   * `maxConcurrentReads` a process's reads hold at most 6 GiB of a ClickHouse server.
   */
  maxReadMemoryBytes: key(intAtLeast(16 * MIB).default(1024 * MIB), {
    help: 'ClickHouse max_memory_usage of each read query',
    env: 'HOLDSCOPE_MAX_READ_MEMORY_BYTES',
    placeholder: 'bytes',
  }),
  /**
   * Read queries running in ClickHouse at once per process; the rest wait their turn. @default 6: /api/flags runs five
   * queries at once, which a ClickHouse server runs in parallel (its p95 is timed that way, docs/benchmarks.md), and the
   * page's pairing review a sixth beside them. A client from `openReadClient` on embedded ClickHouse runs one at a time
   * whatever this says (queries/read-gate.ts says why).
   */
  maxConcurrentReads: key(intAtLeast(1).default(6), {
    help: 'read queries running in ClickHouse at once',
    env: 'HOLDSCOPE_MAX_CONCURRENT_READS',
    placeholder: 'n',
  }),
  /**
   * Read queries waiting for a turn, past which a read is refused with 503 and Retry-After. @default 32: three loads of
   * the on-call page at once (nine queries each) behind those running. On embedded ClickHouse, where reads run one at
   * a time, a longer queue only makes each wait longer than the page's refresh (the fault test's week-wide /api/flags
   * took about 2.4 s each: 64 queued queries were a 30 s wait).
   */
  maxQueuedReads: key(intAtLeast(0).default(32), {
    help: 'read queries waiting for a turn before reads are refused (503)',
    env: 'HOLDSCOPE_MAX_QUEUED_READS',
    placeholder: 'n',
  }),
});
export type ReadLimits = z.output<typeof readLimitsSchema>;

/** The limits of a read when its caller gives none. */
export const DEFAULT_READ_LIMITS: ReadLimits = Object.freeze(readLimitsSchema.parse({}));

/**
 * `holdscope query`'s limits: a postmortem reads more than a page. Still bounded, so that a mistyped year does not
 * scan the whole store.
 */
export const queryReadLimitsSchema = readLimitsSchema.extend({
  /** @default 31 days: every day of the default 30-day retention, so any stored range can be read in one query. */
  maxReadWindowMs: key(intAtLeast(SECOND_MS).default(31 * DAY_MS), {
    help: 'widest from..to one query may cover',
    env: 'HOLDSCOPE_QUERY_MAX_READ_WINDOW_MS',
    placeholder: 'ms',
  }),
  /** @default 600: a month-wide postmortem query at 875,000 lifecycles an hour; the operator waits at a terminal. */
  maxReadSeconds: key(intAtLeast(1).default(600), {
    help: 'ClickHouse max_execution_time of the query',
    env: 'HOLDSCOPE_QUERY_MAX_READ_SECONDS',
    placeholder: 's',
  }),
});

/**
 * The times a read may name: ClickHouse's DateTime range, which the tables' time buckets use. A time outside it would
 * wrap around in ClickHouse (year 9999 became an error 500), so it is refused as input.
 */
export const MIN_READ_TIME_MS = 0;
export const MAX_READ_TIME_MS = Date.UTC(2106, 1, 7, 6, 28, 15);

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?(Z|[+-]\d{2}:?\d{2})?$/i;

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month, 0)).getUTCDate();

/**
 * An ISO 8601 time (`2026-12-01T00:00:00Z`, `2026-12-01 00:00:00.5`, `2026-12-01`, `...+02:00`) as epoch ms. Without a
 * zone it is UTC, as ClickHouse reads the queries' DateTime64(9, 'UTC') parameters. `name` is the parameter the error
 * names.
 */
export function parseReadTime(value: string, name: string): number {
  const m = ISO_TIME.exec(value.trim());
  const expected = `${name}: expected an ISO 8601 time such as 2026-12-01T00:00:00Z, got ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (!m) throw new InputError(expected);
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map((part) => Number(part ?? 0)) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59)
    throw new InputError(expected);
  const fraction = Number(`0.${m[7] ?? '0'}`);
  const zone = (m[8] ?? 'Z').toUpperCase();
  const offsetMin = zone === 'Z' ? 0 : (zone[0] === '-' ? -1 : 1) * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(-2)));
  const ms = Date.UTC(year, month - 1, day, hour, minute, second) + Math.floor(fraction * 1000) - offsetMin * 60_000;
  if (ms < MIN_READ_TIME_MS || ms > MAX_READ_TIME_MS) {
    throw new InputError(
      `${name}: ${value} is outside the times holdscope can read (${new Date(MIN_READ_TIME_MS).toISOString()} to ${new Date(MAX_READ_TIME_MS).toISOString()})`,
    );
  }
  return ms;
}

/** A duration as an operator reads it, exactly: `7 days`, `1 day 2 hours`, `90 minutes` is `1 hour 30 minutes`, `7 days 0.001 s`. */
export function describeDuration(ms: number): string {
  const parts: string[] = [];
  let rest = ms;
  for (const [unit, name] of [
    [DAY_MS, 'day'],
    [HOUR_MS, 'hour'],
    [60_000, 'minute'],
  ] as const) {
    const n = Math.floor(rest / unit);
    if (n > 0) parts.push(`${n} ${name}${n === 1 ? '' : 's'}`);
    rest -= n * unit;
  }
  if (rest > 0 || parts.length === 0) parts.push(`${rest / 1000} s`);
  return parts.join(' ');
}

/** Refuses a range that ends before it starts or is wider than `maxWindowMs`, naming the parameters and the limit. */
export function checkReadWindow(
  fromMs: number,
  toMs: number,
  maxWindowMs: number,
  names: { from: string; to: string } = { from: 'from', to: 'to' },
): void {
  if (toMs <= fromMs)
    throw new InputError(
      `${names.to} must be after ${names.from} (got ${new Date(fromMs).toISOString()} .. ${new Date(toMs).toISOString()})`,
    );
  if (toMs - fromMs > maxWindowMs) {
    throw new InputError(
      `${names.from}..${names.to} covers ${describeDuration(toMs - fromMs)}; a read may cover at most ${describeDuration(maxWindowMs)} ` +
        `(the max read window, maxReadWindowMs = ${maxWindowMs}): narrow the range`,
    );
  }
}

/** A checked read range: ISO strings for the queries, epoch ms for arithmetic. */
export interface ReadWindow {
  from: string;
  to: string;
  fromMs: number;
  toMs: number;
}

/**
 * The from/to of a request, checked: both ISO 8601 times, `now` or times relative to now (`-2h`) within range, `to` after `from`, at most `maxWindowMs` apart.
 * With `defaultMs`, a missing `to` is now and a missing `from` is `defaultMs` before `to`; without it both are required.
 */
export function readWindow(
  from: string | undefined,
  to: string | undefined,
  limits: Pick<ReadLimits, 'maxReadWindowMs'>,
  options: { defaultMs?: number; now?: () => number } = {},
): ReadWindow {
  if (options.defaultMs === undefined && (!from || !to)) throw new InputError('from and to are required, as ISO 8601 times');
  const nowMs = (options.now ?? Date.now)();
  const toMs = to ? parseWindowTime(to, 'to', nowMs) : nowMs;
  const fromMs = from ? parseWindowTime(from, 'from', nowMs) : toMs - (options.defaultMs as number);
  checkReadWindow(fromMs, toMs, limits.maxReadWindowMs);
  return { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString(), fromMs, toMs };
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** `90s`, `30m`, `1h`, `1.5d` as ms, or undefined when it is not one. */
export function durationMs(text: string): number | undefined {
  const m = DURATION.exec(text.trim());
  return m ? Math.round(Number(m[1]) * (UNIT_MS[m[2] as string] as number)) : undefined;
}

/** An ISO 8601 time, `now`, or a time relative to now (`-2h`, `-30m`, `-1d`), as epoch ms; `name` is the key errors name. */
export function parseWindowTime(value: string, name: string, nowMs: number): number {
  const text = value.trim();
  if (text === 'now') return nowMs;
  if (text.startsWith('-')) {
    const ago = durationMs(text.slice(1));
    if (ago === undefined)
      throw new InputError(
        `${name}: expected an ISO 8601 time or a time relative to now such as -2h or -30m, got ${JSON.stringify(value)}`,
      );
    return nowMs - ago;
  }
  return parseReadTime(text, name);
}
