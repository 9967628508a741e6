import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { headingAnchor, inlineHtml, markdownToHtml } from '../../dashboards/pages/markdown.ts';

describe('the runbooks Markdown', () => {
  it('anchors headings as GitHub does: lowercased, punctuation dropped, spaces to dashes, repeats numbered', () => {
    assert.equal(headingAnchor('HoldscopeLateWrite'), 'holdscopelatewrite');
    assert.equal(headingAnchor('What `holdscope_flags` means, and why?'), 'what-holdscope_flags-means-and-why');
    assert.equal(headingAnchor('See [the rules](rules.yml) — **now**'), 'see-the-rules--now');
    const html = markdownToHtml('## Checks\n\ntext\n\n## Checks\n');
    assert.match(html, /<h2 id="checks">Checks<\/h2>/);
    assert.match(html, /<h2 id="checks-1">Checks<\/h2>/);
  });

  it('escapes every piece of text, in code too, and links only to web addresses and its own anchors', () => {
    const evil = '<script>alert(1)</script>';
    const html = markdownToHtml(
      [
        `# Title ${evil}`,
        '',
        `A paragraph with \`${evil}\` and **bold <b>** and [a link](https://example.org/?a=1&b="x") and`,
        '[a section](#holdscopelatewrite), [script](javascript:alert(1)) and [a doc](detections.md).',
        '',
        '- one `code`',
        '  continued',
        '- two',
        '',
        '1. first',
        '2. second',
        '',
        '```sh',
        `curl '${evil}' && echo "</code></pre>"`,
        '```',
        '',
        '| kind | alert |',
        '| --- | --- |',
        `| late_write | ${evil} |`,
      ].join('\n'),
    );
    assert.doesNotMatch(html, /<script|<b>|<\/code><\/pre>"|href="javascript/);
    assert.match(html, /<h1 id="title-scriptalert1script">Title &#60;script&#62;/);
    assert.match(html, /<code>&#60;script&#62;alert\(1\)&#60;\/script&#62;<\/code>/);
    assert.match(html, /<strong>bold &#60;b&#62;<\/strong>/);
    assert.match(html, /<a href="https:\/\/example.org\/\?a=1&#38;b=&#34;x&#34;">a link<\/a>/);
    assert.match(html, /<a href="#holdscopelatewrite">a section<\/a>/);
    assert.match(html, /<span class="doc-ref" title="javascript:alert\(1\)">script<\/span>/);
    assert.match(html, /<ul><li>one <code>code<\/code>\ncontinued<\/li><li>two<\/li><\/ul>/);
    assert.match(html, /<ol><li>first<\/li><li>second<\/li><\/ol>/);
    assert.match(html, /<pre><code class="language-sh">curl &#39;&#60;script&#62;/);
    assert.match(html, /<tr><td>late_write<\/td><td>&#60;script&#62;alert\(1\)&#60;\/script&#62;<\/td><\/tr>/);
    assert.equal(inlineHtml('a ``code with ` tick`` b'), 'a <code>code with &#96; tick</code> b');
  });
});
