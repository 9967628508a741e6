// The arms of `holdscope compare` and `/api/compare`: one parser for both, over one flat form of `key=value` pairs.
//
// Syntax, and why: an arm is a selector, `baseline.KEY=VALUE` and `candidate.KEY=VALUE` (the API's query string as is;
// the CLI's `--baseline "decode_version=v1 from=-2h"` is split into the same pairs), with `both.KEY=VALUE` for what
// the arms share (`--both`), which an arm's own key overrides. Flat dotted keys rather than a JSON selector because a
// query string carries them without encoding and an unknown key can be named exactly (`baseline.decode_verison`). The
// two questions a rollout raises are then one command each:
//   - version A against version B over the same hour: `--both "from=-1h" --baseline decode_version=v1 --candidate decode_version=v2`
//   - the hour before a rollout against the hour after it: `--rollout-at 2026-12-01T12:00:00Z --window 1h`, which sets
//     baseline from..to = T - 1h..T and candidate T..T + 1h (and refuses a from/to given beside it).
// Times are ISO 8601 (queries/read-window.ts, the rule of every read) or relative to now (`now`, `-2h`, `-30m`); each
// arm's window is bounded by the max read window like any read, and reported back as the ISO times it resolved to.
import { InputError } from '../common/index.ts';
import { checkReadWindow, describeDuration, durationMs, parseWindowTime, type ReadLimits } from './read-window.ts';

/** The filters of an arm: each optional, an exact match; empty or absent selects every value. */
export const SELECTOR_FILTERS = [
  'cluster',
  'decode_engine',
  'decode_version',
  'prefill_engine',
  'prefill_version',
  'backend',
  // An experiment's arm and run, as the decode engines label their resources (pd.experiment.arm, pd.experiment.run).
  'arm',
  'run',
] as const;
export type SelectorFilter = (typeof SELECTOR_FILTERS)[number];
const SELECTOR_KEYS: readonly string[] = [...SELECTOR_FILTERS, 'from', 'to'];

export type ArmName = 'baseline' | 'candidate';
export const ARM_NAMES: readonly ArmName[] = ['baseline', 'candidate'];

/** One arm, resolved: its filters and its window (holds starting in [from, to)). */
export interface ArmSelector {
  filters: Partial<Record<SelectorFilter, string>>;
  from: string;
  to: string;
  fromMs: number;
  toMs: number;
}

export interface CompareRequest {
  baseline: ArmSelector;
  candidate: ArmSelector;
}

/**
 * An arm's window when it names neither end, and the rollout shorthand's when `window` is absent. @default 1 hour: the
 * report's question is "the hour before against the hour after", and an hour of a busy cluster is ample holds.
 */
export const DEFAULT_COMPARE_WINDOW_MS = 3_600_000;

/** `decode_version=v1 from=-2h` as pairs; values hold no spaces (engine ids, versions and times have none). */
export function parseSelectorText(text: string, flag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.trim().split(/\s+/).filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new InputError(`${flag}: expected key=value pairs separated by spaces, got ${JSON.stringify(pair)}`);
    const key = pair.slice(0, eq);
    if (key in out) throw new InputError(`${flag}: ${key} is given twice`);
    out[key] = pair.slice(eq + 1);
  }
  return out;
}

/** The flat pairs split by prefix, every key checked: an unknown one is an InputError naming it. */
function splitPairs(pairs: Record<string, string>): {
  arms: Record<ArmName | 'both', Record<string, string>>;
  rolloutAt?: string;
  window?: string;
} {
  const arms: Record<ArmName | 'both', Record<string, string>> = { baseline: {}, candidate: {}, both: {} };
  const known = `baseline.KEY, candidate.KEY and both.KEY (KEY one of ${SELECTOR_KEYS.join(', ')}), rollout_at, window`;
  let rolloutAt: string | undefined;
  let window: string | undefined;
  for (const [key, value] of Object.entries(pairs)) {
    if (key === 'rollout_at') rolloutAt = value;
    else if (key === 'window') window = value;
    else {
      const dot = key.indexOf('.');
      const prefix = key.slice(0, dot);
      const field = key.slice(dot + 1);
      if (dot < 0 || !(prefix === 'baseline' || prefix === 'candidate' || prefix === 'both') || !SELECTOR_KEYS.includes(field))
        throw new InputError(`unknown parameter ${JSON.stringify(key)}; compare takes ${known}`);
      arms[prefix][field] = value;
    }
  }
  return { arms, rolloutAt, window };
}

function armWindow(
  arm: ArmName,
  given: Record<string, string>,
  limits: Pick<ReadLimits, 'maxReadWindowMs'>,
  nowMs: number,
): Pick<ArmSelector, 'fromMs' | 'toMs'> {
  const toMs = given.to ? parseWindowTime(given.to, `${arm}.to`, nowMs) : nowMs;
  const fromMs = given.from ? parseWindowTime(given.from, `${arm}.from`, nowMs) : toMs - DEFAULT_COMPARE_WINDOW_MS;
  checkReadWindow(fromMs, toMs, limits.maxReadWindowMs, { from: `${arm}.from`, to: `${arm}.to` });
  return { fromMs, toMs };
}

/** The rollout shorthand: the `window` before `rollout_at` against the `window` after it. */
function rolloutWindows(
  rolloutAt: string,
  window: string | undefined,
  limits: Pick<ReadLimits, 'maxReadWindowMs'>,
  nowMs: number,
): Record<ArmName, Pick<ArmSelector, 'fromMs' | 'toMs'>> {
  const at = parseWindowTime(rolloutAt, 'rollout_at', nowMs);
  const width = window === undefined ? DEFAULT_COMPARE_WINDOW_MS : durationMs(window);
  if (!width) throw new InputError(`window: expected a duration such as 30m, 1h or 1d, got ${JSON.stringify(window)}`);
  checkReadWindow(at - width, at, limits.maxReadWindowMs, { from: 'rollout_at - window', to: 'rollout_at' });
  return { baseline: { fromMs: at - width, toMs: at }, candidate: { fromMs: at, toMs: at + width } };
}

/**
 * The one parser of a comparison, from flat pairs (`baseline.decode_version=v1`, `both.from=-1h`, `rollout_at`,
 * `window`): the API's query string, and the CLI's flags once split (cli/compare.ts).
 */
export function parseCompareRequest(
  pairs: Record<string, string>,
  limits: Pick<ReadLimits, 'maxReadWindowMs'>,
  now: () => number = Date.now,
): CompareRequest {
  const { arms, rolloutAt, window } = splitPairs(pairs);
  const nowMs = now();
  if (window !== undefined && rolloutAt === undefined)
    throw new InputError('window: only with rollout_at (the window before and after it)');
  if (rolloutAt !== undefined) {
    for (const prefix of ['both', ...ARM_NAMES] as const)
      for (const end of ['from', 'to'])
        if (arms[prefix][end] !== undefined) throw new InputError(`${prefix}.${end}: not with rollout_at, which sets both arms' windows`);
  }
  const rollout = rolloutAt === undefined ? undefined : rolloutWindows(rolloutAt, window, limits, nowMs);
  const arm = (name: ArmName): ArmSelector => {
    const given = { ...arms.both, ...arms[name] };
    const filters: ArmSelector['filters'] = {};
    for (const key of SELECTOR_FILTERS) if (given[key]) filters[key] = given[key];
    const { fromMs, toMs } = rollout?.[name] ?? armWindow(name, given, limits, nowMs);
    return { filters, fromMs, toMs, from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString() };
  };
  return { baseline: arm('baseline'), candidate: arm('candidate') };
}

/** `decode_version=v1, 2026-12-01T11:00:00.000Z..2026-12-01T12:00:00.000Z (1 hour)`: how reports name an arm. */
export function describeSelector(s: ArmSelector): string {
  const filters = SELECTOR_FILTERS.filter((k) => s.filters[k] !== undefined).map((k) => `${k}=${s.filters[k]}`);
  return [...filters, `${s.from}..${s.to} (${describeDuration(s.toMs - s.fromMs)})`].join(', ');
}
