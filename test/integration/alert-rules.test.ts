import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const rules = join(root, 'dashboards', 'alerts', 'holdscope.rules.yml');
const rulesTest = join(root, 'dashboards', 'alerts', 'holdscope.rules.test.yml');
// Debian's prometheus package (scripts/ensure-deps.mjs installs it for `npm test`).
const promtool = existsSync('/usr/bin/promtool') ? '/usr/bin/promtool' : 'promtool';

function run(args: string[]): { status: number | null; output: string } {
  const result = spawnSync(promtool, args, { cwd: root, encoding: 'utf8', timeout: 60_000 });
  if (result.error) throw new Error(`could not run ${promtool} (install Debian's prometheus package): ${result.error.message}`);
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe('Prometheus alerting rules (promtool)', () => {
  it('promtool check rules accepts dashboards/alerts/holdscope.rules.yml', () => {
    const { status, output } = run(['check', 'rules', rules]);
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS/, output);
  });

  it('promtool test rules passes dashboards/alerts/holdscope.rules.test.yml', () => {
    const { status, output } = run(['test', 'rules', rulesTest]);
    assert.equal(status, 0, output);
  });

  it('every alert is unit-tested firing and silent, and links to its runbook section', () => {
    const ruleText = readFileSync(rules, 'utf8');
    const testText = readFileSync(rulesTest, 'utf8');
    const runbooks = readFileSync(join(root, 'docs', 'runbooks.md'), 'utf8');
    const alerts = [...new Set([...ruleText.matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1] as string))];
    assert.ok(alerts.length >= 10, `alerts found: ${alerts.join(', ')}`);
    const anchors = new Set([...runbooks.matchAll(/^## (\S+)/gm)].map((m) => (m[1] as string).toLowerCase()));
    for (const alert of alerts) {
      assert.ok(ruleText.includes(`runbook_url: "docs/runbooks.md#${alert.toLowerCase()}"`), `${alert}: runbook_url`);
      assert.ok(anchors.has(alert.toLowerCase()), `${alert}: docs/runbooks.md has no '## ${alert}' section`);
      // An eval of this alert expecting alerts, and one expecting none.
      const evals = [...testText.matchAll(new RegExp(`alertname: ${alert}\\n\\s+exp_alerts:(.*)`, 'g'))].map((m) =>
        (m[1] as string).trim(),
      );
      assert.ok(evals.includes('[]'), `${alert}: no test in which it must stay silent`);
      assert.ok(evals.includes(''), `${alert}: no test in which it fires`);
    }
  });
});
