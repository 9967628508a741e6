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
export function parseConfig<S extends z.ZodType>(
  schema: S,
  raw: Record<string, unknown>,
  keyName: (path: string) => string = (p) => p,
  isSecret: (path: string) => boolean = () => false,
): z.output<S> {
  const result = schema.safeParse(raw, { reportInput: true });
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const path = issue.path.join('.');
    const given =
      path === ''
        ? undefined
        : issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown> | undefined)?.[k as PropertyKey], raw);
    return `${keyName(path)}: ${issue.message.replace(/^Invalid (input|option): /, '')}, got ${isSecret(path) ? 'a value not shown' : shown(given)}`;
  });
  throw new ConfigError(`invalid configuration:\n  ${lines.join('\n  ')}`);
}

/** A positive number given as text (flags and environment variables arrive as strings). */
export const positiveNumber = (what = 'a number > 0') =>
  z.coerce.number({ error: `expected ${what}` }).refine((n) => Number.isFinite(n) && n > 0, `expected ${what}`);
/** An integer at or above `min`, given as text; a value below it is named with the minimum in the error. */
export const intAtLeast = (min: number) => {
  const expected = `expected an integer >= ${min}`;
  return z.coerce.number({ error: expected }).int(expected).min(min, expected);
};
export const nonNegativeInt = () => intAtLeast(0);
/**
 * How long a long-running command may take to stop after SIGTERM or SIGINT (ms) before it exits with status 1 and a log
 * line naming what it still waited for: 30 s, above the pipeline's rebalance timeout plus the 5 s a group join in
 * progress can take, and within Kubernetes' default grace period of 30 s once set to 40 (docs/operations.md).
 */
export const shutdownTimeoutMs = () =>
  key(positiveNumber().default(30_000), { help: 'after SIGTERM/SIGINT, exit with status 1 if stopping takes longer', placeholder: 'ms' });

/** Kafka bootstrap brokers as `host:port[,host:port...]`, given as one text. */
export const brokerList = () =>
  z
    .string()
    .transform((s) =>
      s
        .split(',')
        .map((b) => b.trim())
        .filter((b) => b.length > 0),
    )
    .refine((list) => list.length > 0 && list.every((b) => /^[^\s:]+:\d+$/.test(b)), 'expected host:port[,host:port...]');
export const port = () =>
  z.coerce
    .number({ error: 'expected a port number 0-65535' })
    .int('expected a port number 0-65535')
    .min(0, 'expected a port number 0-65535')
    .max(65535, 'expected a port number 0-65535');

/**
 * A ClickHouse identifier holdscope writes into SQL text itself (a database or cluster name in the schema's DDL):
 * letters, digits and underscores, so it needs no quoting. Queries bind it as {db:Identifier} instead.
 */
export const clickhouseIdentifier = () =>
  z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'expected an identifier ([A-Za-z_][A-Za-z0-9_]*)');

/** `value` checked as a clickhouseIdentifier where no configuration schema read it; a ConfigError names `key`. */
export function checkedIdentifier(key: string, value: string): string {
  const result = clickhouseIdentifier().safeParse(value);
  if (!result.success) throw new ConfigError(`${key}: ${result.error.issues[0]?.message ?? 'invalid'}, got ${JSON.stringify(value)}`);
  return value;
}

/** What a configuration key says about itself beyond its schema: its help text, and the environment variable that may set it. */
export interface KeyInfo {
  /** One line for `--help`: what the key sets (the schema's JSDoc says why its default is what it is). */
  help: string;
  /** An environment variable that sets the key when no flag does. */
  env?: string;
  /** Shown as `***` in help and never echoed back in an error (tokens, passwords). */
  secret?: boolean;
  /** The flag's value placeholder in help, e.g. `ms`, `list`; `value` when absent. */
  placeholder?: string;
}

/** Every configuration key's KeyInfo, attached where the key's schema is declared (`key()`). */
export const keyRegistry = z.registry<KeyInfo>();

/** Declares a configuration key: its schema (with its default) and its help and environment variable, in one place. */
export function key<S extends z.ZodType>(schema: S, info: KeyInfo): S {
  keyRegistry.add(schema, info);
  return schema;
}

type Shape = Record<string, z.ZodType>;

/** The flag of a configuration key: `maxBodyBytes` is `--max-body-bytes`. */
export const flagOf = (name: string) => '--' + name.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());

/** The default a key takes when neither flag nor environment sets it (undefined when it has none). */
export function defaultOf(schema: z.ZodType): unknown {
  const result = schema.safeParse(undefined);
  return result.success ? result.data : undefined;
}

/** The keys of an object schema with what they say about themselves; keys declared without `key()` have no help. */
export function describeKeys(schema: z.ZodObject<Shape>): { name: string; flag: string; schema: z.ZodType; info: KeyInfo | undefined }[] {
  return Object.entries(schema.shape).map(([name, field]) => ({ name, flag: flagOf(name), schema: field, info: keyRegistry.get(field) }));
}

/**
 * Validates configuration once, at start-up, from flags over environment over the schema's defaults. Errors name the
 * flag and its variable, what is expected and what was given (secrets are not echoed).
 */
export function loadConfig<S extends z.ZodObject<Shape>>(
  schema: S,
  flags: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): z.output<S> {
  const keys = describeKeys(schema);
  const raw: Record<string, unknown> = {};
  for (const { name, info } of keys) {
    const fromEnv = info?.env ? env[info.env] : undefined;
    if (fromEnv !== undefined && fromEnv !== '') raw[name] = fromEnv;
  }
  for (const [name, value] of Object.entries(flags)) if (value !== undefined) raw[name] = value;
  const byName = new Map(keys.map((k) => [k.name, k]));
  return parseConfig(
    schema,
    raw,
    (path) => {
      const k = byName.get(path.split('.')[0] ?? '');
      return k?.info?.env ? `${k.flag} (${k.info.env})` : (k?.flag ?? path);
    },
    (path) => byName.get(path.split('.')[0] ?? '')?.info?.secret === true,
  );
}
