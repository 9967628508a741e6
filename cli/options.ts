import { Option, type Command } from 'commander';
import { z } from 'zod';
import { defaultOf, describeKeys } from '../common/config.ts';

type ObjectSchema = z.ZodObject<Record<string, z.ZodType>>;

function innermost(schema: z.ZodType): z.ZodType {
  let inner: z.ZodType = schema;
  while (inner instanceof z.ZodDefault || inner instanceof z.ZodOptional || inner instanceof z.ZodPipe) {
    inner = inner instanceof z.ZodPipe ? (inner.in as z.ZodType) : (inner.unwrap() as z.ZodType);
  }
  return inner;
}

/** A default worth showing in help: none for an absent value, an empty list or an empty text. */
function shownDefault(value: unknown): string | undefined {
  const text = Array.isArray(value) ? value.join(',') : value === undefined ? '' : String(value);
  return text === '' ? undefined : text;
}

/**
 * Adds one flag per key of a configuration schema, with the key's help, its environment variable and its default: the
 * schema (common/config.ts `key()`) is the only place these are written. Flags carry no default of their own, so that
 * `loadConfig` can tell a flag given from one absent and let the environment and then the schema's default decide.
 */
export function addConfigOptions(command: Command, schema: ObjectSchema, options: { omit?: readonly string[] } = {}): Command {
  for (const { name, flag, schema: field, info } of describeKeys(schema)) {
    if (options.omit?.includes(name)) continue;
    if (!info) throw new Error(`configuration key ${name} has no help: declare it with key()`);
    const fallback = defaultOf(field);
    const inner = innermost(field);
    if (inner instanceof z.ZodBoolean) {
      const negated = fallback === true;
      command.addOption(new Option(negated ? `--no-${flag.slice(2)}` : flag, info.help + (info.env ? ` (${info.env})` : '')));
      continue;
    }
    const shown = info.secret ? undefined : shownDefault(fallback);
    const notes = [info.env, shown === undefined ? undefined : `default ${shown}`].filter(Boolean);
    const option = new Option(`${flag} <${info.placeholder ?? 'value'}>`, info.help + (notes.length > 0 ? ` (${notes.join('; ')})` : ''));
    if (inner instanceof z.ZodEnum) option.choices(inner.options.map(String));
    command.addOption(option);
  }
  return command;
}
