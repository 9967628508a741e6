import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { loadConfig } from '../../common/config.ts';
import { renderAlertRules, rulesConfigSchema } from '../../dashboards/index.ts';
import { flagThresholdsSchema, type FlagThresholds } from '../../queries/index.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const alertsDir = join(root, 'dashboards', 'alerts');
const template = readFileSync(join(alertsDir, 'holdscope.rules.template.yml'), 'utf8');
const defaults = flagThresholdsSchema.parse({});
const base = { thresholds: defaults, externalUrl: 'http://localhost:8080', jobs: ['holdscope'] };

/** The thresholds the template names (`${key}`), in the order of flagThresholdsSchema. */
const usedKeys = Object.keys(defaults).filter((k) => template.includes('${' + k + '}'));

/** Every threshold moved off its default to a value of its own, within its schema's bounds. */
function distinctThresholds(): FlagThresholds {
  const moved = Object.entries(defaults).map(([k, v], i) => [k, Number.isInteger(v) ? v + 1000 + i : (101 + i) / 10_000]);
  return flagThresholdsSchema.parse(Object.fromEntries(moved));
}

/** The PromQL of every rule: `expr: |` blocks and one-line exprs. */
function expressions(rules: string): string[] {
  const found: string[] = [];
  const lines = rules.split('\n');
  lines.forEach((line, i) => {
    const m = /^(\s*)expr: (.*)$/.exec(line);
    if (!m) return;
    if (m[2] !== '|') return void found.push(m[2] as string);
    const block: string[] = [];
    for (let j = i + 1; j < lines.length && ((lines[j] as string).startsWith(`${m[1] as string}  `) || lines[j] === ''); j++)
      block.push(lines[j] as string);
    found.push(block.join('\n'));
  });
  return found;
}

/** The expression of the first rule of this alert. */
function exprOf(rules: string, alert: string): string {
  const at = rules.indexOf(`- alert: ${alert}\n`);
  assert.ok(at >= 0, `no rule ${alert}`);
  return expressions(rules.slice(at))[0] as string;
}

const numbers = (text: string) => [...text.matchAll(/(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])/g)].map((m) => Number(m[0]));

describe('alert rules rendered from the flags thresholds (dashboards/alerts/rules.ts)', () => {
  it('the checked-in rules are the rendering with the defaults (regenerate: npx holdscope rules > dashboards/alerts/holdscope.rules.yml)', () => {
    const config = loadConfig(rulesConfigSchema, {}, {});
    assert.equal(config.externalUrl, 'http://localhost:8080');
    assert.deepEqual(config.job, ['holdscope']);
    const rendered = renderAlertRules({ thresholds: defaults, externalUrl: config.externalUrl, jobs: config.job });
    assert.ok(
      rendered === readFileSync(join(alertsDir, 'holdscope.rules.yml'), 'utf8'),
      'dashboards/alerts/holdscope.rules.yml is not the rendering of the template with the defaults: run ' +
        '`npx holdscope rules > dashboards/alerts/holdscope.rules.yml` (with HOLDSCOPE_FLAG_THRESHOLDS and HOLDSCOPE_EXTERNAL_URL unset)',
    );
    assert.doesNotMatch(rendered, /\$\{|^\s*##/m, 'placeholders or template notes left in the rules');
  });

  it('names the thresholds the alerts share with their flags, and writes none of them as a number', () => {
    assert.deepEqual(usedKeys, [
      'timeoutHeavyShare',
      'timeoutHeavyMinHolds',
      'longTailFractionOfTimeout',
      'longTailMinHolds',
      'pinnedCapacityShare',
      'pinnedCapacityCriticalShare',
    ]);
    const moved = distinctThresholds();
    const rendered = renderAlertRules({ ...base, thresholds: moved });
    const inExpressions = new Set(expressions(rendered).flatMap(numbers));
    // The numbers Go templates format into the annotations, e.g. `{{ 0.05 | humanizePercentage }}`.
    const inAnnotations = new Set([...rendered.matchAll(/\{\{ ([\d.e-]+) \|/g)].map((m) => Number(m[1])));
    for (const k of usedKeys) {
      const key = k as keyof FlagThresholds;
      assert.ok(inExpressions.has(moved[key]), `${key}: ${moved[key]} is in no expression`);
      assert.ok(!inExpressions.has(defaults[key]), `${key}: its default ${defaults[key]} is written into an expression`);
      assert.ok(!inAnnotations.has(defaults[key]), `${key}: its default ${defaults[key]} is written into an annotation`);
    }
  });

  it('a threshold changed for the flags changes the rule that judges with it', () => {
    const with_ = (thresholds: Partial<FlagThresholds>) => renderAlertRules({ ...base, thresholds: { ...defaults, ...thresholds } });
    assert.match(
      exprOf(with_({ timeoutHeavyShare: 0.2 }), 'HoldscopeTimeoutHeavy'),
      /holdscope_hold_timeout_share_lower_bound > 0\.2(?![\d.])/,
    );
    assert.match(exprOf(with_({ timeoutHeavyMinHolds: 50 }), 'HoldscopeTimeoutHeavy'), />= 50(?![\d.])/);
    assert.match(
      exprOf(with_({ longTailFractionOfTimeout: 0.75 }), 'HoldscopeLongTransferTail'),
      />= 0\.75 \* holdscope_transfer_tail_hold_timeout_seconds/,
    );
    assert.match(exprOf(with_({ longTailMinHolds: 7 }), 'HoldscopeLongTransferTail'), /holdscope_transfer_tail_holds >= 7(?![\d.])/);
    assert.match(exprOf(with_({ pinnedCapacityShare: 0.35 }), 'HoldscopeKvExhaustionInAbortStorm'), /\[2m\]\) >= 0\.35(?![\d.])/);
    assert.match(exprOf(with_({ pinnedCapacityCriticalShare: 0.9 }), 'HoldscopeKvPinned'), /holdscope_kv_pinned_fraction >= 0\.9(?![\d.])/);
    assert.match(with_({ pinnedCapacityCriticalShare: 0.9 }), /\(alert at \{\{ 0\.9 \| humanizePercentage \}\}\)/);
  });

  it('links every alert to its runbook and the page under the external URL, and matches the given jobs', () => {
    const rendered = renderAlertRules({
      ...base,
      externalUrl: 'https://holdscope.example.com/pd',
      jobs: ['holdscope-serve', 'pipeline.v2'],
    });
    const runbooks = [...rendered.matchAll(/runbook_url: "([^"]*)"/g)].map((m) => m[1] as string);
    assert.equal(runbooks.length, [...rendered.matchAll(/- alert: /g)].length);
    for (const url of runbooks) assert.match(url, /^https:\/\/holdscope\.example\.com\/pd\/runbooks#holdscope[a-z]+$/);
    for (const m of rendered.matchAll(/dashboard_url: "([^"]*)"/g))
      assert.match(m[1] as string, /^https:\/\/holdscope\.example\.com\/pd\/\?/);
    assert.match(exprOf(rendered, 'HoldscopeDown'), /^up\{job=~"holdscope-serve\|pipeline\[\.\]v2"\} == 0$/);
    assert.match(exprOf(rendered, 'HoldscopeAbsent'), /^absent\(up\{job=~"holdscope-serve\|pipeline\[\.\]v2"\}\)$/);
  });

  it('refuses a URL or job name that would break the rules, and a placeholder it has no value for', () => {
    for (const externalUrl of ['http://h/?a=1', 'http://h/#x', 'http://h/a"b', 'http://h/{{ x }}'])
      assert.throws(() => renderAlertRules({ ...base, externalUrl }), /--external-url/, externalUrl);
    assert.throws(() => renderAlertRules({ ...base, jobs: ['a"b'] }), /--job/);
    assert.throws(() => renderAlertRules({ ...base, jobs: [] }), /--job/);
    assert.throws(() => renderAlertRules(base, 'expr: x > ${noSuchThreshold}\n'), /no value for \$\{noSuchThreshold\}/);
    assert.throws(() => loadConfig(rulesConfigSchema, { job: 'a b' }, {}), /--job \(HOLDSCOPE_PROMETHEUS_JOBS\)/);
    assert.throws(() => loadConfig(rulesConfigSchema, { externalUrl: 'ftp://x' }, {}), /--external-url \(HOLDSCOPE_EXTERNAL_URL\)/);
  });
});
