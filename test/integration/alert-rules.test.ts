import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const rules = join(root, 'dashboards', 'alerts', 'holdscope.rules.yml');
const rulesTest = join(root, 'dashboards', 'alerts', 'holdscope.rules.test.yml');
// Debian's prometheus package (scripts/ensure-deps.mjs installs it for `npm test`).
const promtool = existsSync('/usr/bin/promtool') ? '/usr/bin/promtool' : 'promtool';
const scratch = mkdtempSync(join(tmpdir(), 'holdscope-rules-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): { status: number | null; output: string; stdout: string } {
  const result = spawnSync(command, args, { cwd: root, encoding: 'utf8', timeout: 60_000, env });
  if (result.error)
    throw new Error(`could not run ${command} (for promtool, install Debian's prometheus package): ${result.error.message}`);
  return { status: result.status, output: `${result.stdout}${result.stderr}`, stdout: result.stdout };
}

/** `holdscope rules` as an operator runs it, with no holdscope configuration from this shell but what is given. */
function holdscopeRules(args: string[], env: Record<string, string> = {}) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HOLDSCOPE_')));
  return run(process.execPath, [join(root, 'bin', 'holdscope.js'), 'rules', ...args], { ...clean, ...env });
}

/** GitHub's heading anchors, which the page's /runbooks reproduces: lowercase, punctuation dropped, spaces as '-'. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  for (const m of markdown.matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = (m[1] as string)
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    let anchor = slug;
    for (let n = 1; anchors.has(anchor); n++) anchor = `${slug}-${n}`;
    anchors.add(anchor);
  }
  return anchors;
}

describe('Prometheus alerting rules (promtool)', () => {
  it('promtool check rules accepts dashboards/alerts/holdscope.rules.yml', () => {
    const { status, output } = run(promtool, ['check', 'rules', rules]);
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS/, output);
  });

  it('promtool test rules passes dashboards/alerts/holdscope.rules.test.yml', () => {
    const { status, output } = run(promtool, ['test', 'rules', rulesTest]);
    assert.equal(status, 0, output);
  });

  it('every alert is unit-tested firing and silent, and links to a runbook section that exists', () => {
    const ruleText = readFileSync(rules, 'utf8');
    const testText = readFileSync(rulesTest, 'utf8');
    const anchors = anchorsOf(readFileSync(join(root, 'docs', 'runbooks.md'), 'utf8'));
    const alerts = [...new Set([...ruleText.matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1] as string))];
    for (const required of [
      'HoldscopeTimeoutHeavy',
      'HoldscopeLongTransferTail',
      'HoldscopeKvExhaustionInAbortStorm',
      'HoldscopeKvPinned',
      'HoldscopeChecksumMismatch',
      'HoldscopePairingIncompatible',
      'HoldscopeLateWrite',
      'HoldscopeUnsafeRelease',
      'HoldscopeAckAfterFailedSend',
      'HoldscopeStaleAckConsumed',
      'HoldscopeAdmissionLeak',
      'HoldscopeViolationAlertsUndelivered',
      'HoldscopeDown',
      'HoldscopeAbsent',
      'HoldscopeIngestionStalled',
    ])
      assert.ok(alerts.includes(required), `no alert ${required}`);
    const links = [...ruleText.matchAll(/runbook_url: "http:\/\/localhost:8080\/runbooks#([^"]+)"/g)].map((m) => m[1] as string);
    assert.equal(links.length, [...ruleText.matchAll(/^\s*- alert: /gm)].length, 'every rule has an absolute runbook_url');
    for (const anchor of links) assert.ok(anchors.has(anchor), `docs/runbooks.md has no section with the anchor #${anchor}`);
    for (const alert of alerts) {
      assert.ok(links.includes(alert.toLowerCase()), `${alert}: runbook_url is not its own section`);
      // An eval of this alert expecting alerts, and one expecting none.
      const evals = [...testText.matchAll(new RegExp(`alertname: ${alert}\\n\\s+exp_alerts:(.*)`, 'g'))].map((m) =>
        (m[1] as string).trim(),
      );
      assert.ok(evals.includes('[]'), `${alert}: no test in which it must stay silent`);
      assert.ok(evals.includes(''), `${alert}: no test in which it fires`);
    }
  });

  it('holdscope rules renders the thresholds of HOLDSCOPE_FLAG_THRESHOLDS, the URL and the jobs into rules promtool accepts', () => {
    const defaults = holdscopeRules([]);
    assert.equal(defaults.status, 0, defaults.output);
    assert.equal(defaults.stdout, readFileSync(rules, 'utf8'), 'npx holdscope rules > dashboards/alerts/holdscope.rules.yml');

    const output = join(scratch, 'custom.rules.yml');
    const custom = holdscopeRules(['--job', 'holdscope-serve,holdscope-pipeline', '--output', output], {
      HOLDSCOPE_FLAG_THRESHOLDS: '{"timeoutHeavyShare":0.15,"pinnedCapacityCriticalShare":0.9}',
      HOLDSCOPE_EXTERNAL_URL: 'https://holdscope.example.com/',
    });
    assert.equal(custom.status, 0, custom.output);
    assert.equal(custom.stdout, '');
    const text = readFileSync(output, 'utf8');
    assert.match(text, /holdscope_hold_timeout_share_lower_bound > 0\.15\n/);
    assert.match(text, /holdscope_kv_pinned_fraction >= 0\.9\n/);
    assert.match(text, /up\{job=~"holdscope-serve\|holdscope-pipeline"\} == 0/);
    assert.match(text, /runbook_url: "https:\/\/holdscope\.example\.com\/runbooks#holdscopekvpinned"/);
    const check = run(promtool, ['check', 'rules', output]);
    assert.equal(check.status, 0, check.output);

    const bad = holdscopeRules([], { HOLDSCOPE_FLAG_THRESHOLDS: '{"timeoutHeavyShare":2}' });
    assert.equal(bad.status, 2, bad.output);
    assert.match(bad.output, /HOLDSCOPE_FLAG_THRESHOLDS\.timeoutHeavyShare/);
  });
});
