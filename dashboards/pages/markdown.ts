// The little Markdown the runbooks use, as HTML: headings with GitHub's anchors (an alert's runbook_url names one),
// paragraphs, lists, simple tables, fenced code, and inline code, bold and links. Every piece of text is escaped; a
// link keeps its target only when it is a web address or an anchor of the page, so a document cannot carry script.
import { escapeHtml } from './escape.ts';

/**
 * GitHub's anchor of a heading: its text lowercased, punctuation dropped, each space a '-'; "## HoldscopeLateWrite" is
 * `#holdscopelatewrite`, the anchor the alerts' runbook_url names.
 */
export function headingAnchor(heading: string): string {
  return plainText(heading)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-');
}

// Code spans, links (a target may hold balanced parentheses, as on GitHub) and bold.
const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\[([^\]]+)\]\(((?:[^()\s]|\([^()\s]*\))+)\)|\*\*(.+?)\*\*/g;

/** The text a reader sees: code spans without their backticks, links as their text, bold as its text. */
function plainText(text: string): string {
  return text.replace(INLINE, (_m, _ticks, code?: string, label?: string, _href?: string, bold?: string) =>
    code !== undefined ? code.trim() : plainText(label ?? bold ?? ''),
  );
}

/** A link's target when it is safe and leads somewhere from this page: a web address or an anchor of the page itself. */
function linkTarget(href: string): string | undefined {
  if (/^https?:\/\//i.test(href) || href.startsWith('#')) return href;
  // The runbooks link to their own sections as `runbooks.md#x` in the repository.
  const self = /^(?:\.\/)?runbooks\.md(#.*)$/.exec(href);
  return self?.[1];
}

/** Code spans, links and bold as HTML, everything else escaped. */
export function inlineHtml(text: string): string {
  let out = '';
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    out += escapeHtml(text.slice(at, m.index));
    at = m.index + m[0].length;
    const [, , code, label, href, bold] = m;
    if (code !== undefined)
      out += `<code>${escapeHtml(code.length > 2 && code.startsWith(' ') && code.endsWith(' ') ? code.slice(1, -1) : code)}</code>`;
    else if (bold !== undefined) out += `<strong>${inlineHtml(bold)}</strong>`;
    else {
      const target = linkTarget(href ?? '');
      // A link into the repository (another document, a source file) has no page here: its text, naming the file.
      out += target
        ? `<a href="${escapeHtml(target)}">${inlineHtml(label ?? '')}</a>`
        : `<span class="doc-ref" title="${escapeHtml(href)}">${inlineHtml(label ?? '')}</span>`;
    }
  }
  return out + escapeHtml(text.slice(at));
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

const cells = (line: string) =>
  line
    .trim()
    .replace(/^\||\|$/g, '')
    .split('|')
    .map((c) => c.trim());

/** Reads one block starting at `lines[i]`: its HTML and the index of the line after it. */
function block(lines: string[], i: number, anchors: Map<string, number>): [string, number] {
  const line = lines[i] ?? '';
  const fence = FENCE.exec(line);
  if (fence) {
    const close = new RegExp(`^\\s{0,3}${fence[1]?.[0] === '~' ? '~' : '`'}{${fence[1]?.length ?? 3},}\\s*$`);
    let end = i + 1;
    while (end < lines.length && !close.test(lines[end] ?? '')) end++;
    const lang = fence[2] ? ` class="language-${escapeHtml(fence[2])}"` : '';
    return [`<pre><code${lang}>${escapeHtml(lines.slice(i + 1, end).join('\n'))}</code></pre>`, end + 1];
  }
  const heading = HEADING.exec(line);
  if (heading) {
    const level = heading[1]?.length ?? 1;
    const text = heading[2] ?? '';
    // Repeated headings get -1, -2... as on GitHub.
    const base = headingAnchor(text);
    const seen = anchors.get(base) ?? 0;
    anchors.set(base, seen + 1);
    const id = seen === 0 ? base : `${base}-${seen}`;
    return [`<h${level} id="${escapeHtml(id)}">${inlineHtml(text)}</h${level}>`, i + 1];
  }
  if (ITEM.test(line)) return list(lines, i);
  if (line.includes('|') && TABLE_RULE.test(lines[i + 1] ?? '')) return table(lines, i);
  let end = i;
  while (end < lines.length && startsParagraphLine(lines, end, end === i)) end++;
  return [`<p>${inlineHtml(lines.slice(i, end).join('\n'))}</p>`, end];
}

/** Whether `lines[i]` continues the paragraph (a blank line, a heading, a fence or a list item ends it). */
function startsParagraphLine(lines: string[], i: number, first: boolean): boolean {
  const line = lines[i] ?? '';
  if (line.trim() === '') return false;
  return first || !(FENCE.test(line) || HEADING.test(line) || ITEM.test(line));
}

function list(lines: string[], i: number): [string, number] {
  const ordered = /^\s*\d/.test(lines[i] ?? '');
  const items: string[][] = [];
  let end = i;
  for (; end < lines.length; end++) {
    const line = lines[end] ?? '';
    if (line.trim() === '' || FENCE.test(line) || HEADING.test(line)) break;
    const item = ITEM.exec(line);
    if (item) items.push([item[2] ?? '']);
    else items.at(-1)?.push(line.trim());
  }
  const tag = ordered ? 'ol' : 'ul';
  return [`<${tag}>${items.map((lines) => `<li>${inlineHtml(lines.join('\n'))}</li>`).join('')}</${tag}>`, end];
}

function table(lines: string[], i: number): [string, number] {
  const head = cells(lines[i] ?? '');
  let end = i + 2;
  const rows: string[][] = [];
  while (end < lines.length && (lines[end] ?? '').includes('|') && (lines[end] ?? '').trim() !== '') rows.push(cells(lines[end++] ?? ''));
  const row = (tag: string, values: string[]) => `<tr>${values.map((v) => `<${tag}>${inlineHtml(v)}</${tag}>`).join('')}</tr>`;
  return [`<table><thead>${row('th', head)}</thead><tbody>${rows.map((r) => row('td', r)).join('')}</tbody></table>`, end];
}

/** A Markdown document as HTML: each block escaped, headings with their GitHub anchors. */
export function markdownToHtml(markdown: string): string {
  const lines = markdown.replace(/\r\n?/g, '\n').split('\n');
  const anchors = new Map<string, number>();
  const out: string[] = [];
  let i = 0;
  while (i < lines.length) {
    if ((lines[i] ?? '').trim() === '') {
      i++;
      continue;
    }
    const [html, next] = block(lines, i, anchors);
    out.push(html);
    i = next;
  }
  return out.join('\n');
}
