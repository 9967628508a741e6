/**
 * A list of strings written as ClickHouse writes an Array(String) literal: `['a','b']`, a quote inside an element
 * doubled (`''`) or escaped (`\'`), backslash escapes as in ClickHouse string literals. How the CLI and
 * `/api/queries` take an `Array(String)` parameter as text.
 *
 * Parsed here, into a list the client then sends escaped, rather than forwarded as text: a ClickHouse server reads
 * a text parameter with TSV escaping, which the client applies to the text as a whole (`'` becomes `\'`), so the
 * server saw `[\'a\']` and refused it, while embedded chdb took the same text as written.
 */
const ESCAPED: Record<string, string> = { n: '\n', t: '\t', r: '\r', '0': '\0', b: '\b', f: '\f', a: '\x07', v: '\v', e: '\x1b' };

/** The strings of `text`, or undefined when it is not such a list (surrounding whitespace allowed). */
export function parseStringListText(text: string): string[] | undefined {
  let i = 0;
  const skipSpace = () => {
    while (i < text.length && /\s/.test(text[i] as string)) i++;
  };
  skipSpace();
  if (text[i] !== '[') return undefined;
  i++;
  skipSpace();
  const out: string[] = [];
  /** After the closing bracket only whitespace may follow. */
  const close = () => {
    i++;
    skipSpace();
    return i === text.length ? out : undefined;
  };
  if (text[i] === ']') return close();
  for (;;) {
    if (text[i] !== "'") return undefined;
    i++;
    let value = '';
    for (;;) {
      if (i >= text.length) return undefined;
      const c = text[i] as string;
      if (c === "'") {
        if (text[i + 1] === "'") {
          value += "'";
          i += 2;
          continue;
        }
        i++;
        break;
      }
      if (c === '\\') {
        if (i + 1 >= text.length) return undefined;
        const next = text[i + 1] as string;
        value += ESCAPED[next] ?? next;
        i += 2;
        continue;
      }
      value += c;
      i++;
    }
    out.push(value);
    skipSpace();
    if (text[i] === ',') {
      i++;
      skipSpace();
      continue;
    }
    return text[i] === ']' ? close() : undefined;
  }
}

/** The list as text parseStringListText reads back (and ClickHouse too): quotes doubled, backslashes escaped. */
export function formatStringListText(values: readonly string[]): string {
  return `[${values.map((v) => `'${v.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`).join(',')}]`;
}
