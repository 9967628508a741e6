import { z } from 'zod';
import { ConfigError } from './errors.ts';

function shown(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
  return text.length > 60 ? text.slice(0, 60) + '…' : text;
}

/**
 * Validates configuration once, at start-up. On failure the error names each bad key, what it expects
 * and the value given, e.g. `--rate: expected a number > 0, got "-3"`.
 */
export function parseConfig<S extends z.ZodType>(schema: S, raw: Record<string, unknown>, keyName: (path: string) => string = (p) => p): z.output<S> {
  const result = schema.safeParse(raw, { reportInput: true });
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const path = issue.path.join('.');
    const given = path === '' ? undefined : issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown> | undefined)?.[k as PropertyKey], raw);
    return `${keyName(path)}: ${issue.message.replace(/^Invalid (input|option): /, '')}, got ${shown(given)}`;
  });
  throw new ConfigError(`invalid configuration:\n  ${lines.join('\n  ')}`);
}

/** A positive number given as text (flags and environment variables arrive as strings). */
export const positiveNumber = (what = 'a number > 0') => z.coerce.number({ error: `expected ${what}` }).refine((n) => Number.isFinite(n) && n > 0, `expected ${what}`);
/** An integer at or above `min`, given as text; a value below it is named with the minimum in the error. */
export const intAtLeast = (min: number) => {
  const expected = `expected an integer >= ${min}`;
  return z.coerce.number({ error: expected }).int(expected).min(min, expected);
};
export const nonNegativeInt = () => intAtLeast(0);
export const port = () => z.coerce.number({ error: 'expected a port number 0-65535' }).int('expected a port number 0-65535').min(0, 'expected a port number 0-65535').max(65535, 'expected a port number 0-65535');
