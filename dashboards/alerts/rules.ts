// The Prometheus alerting rules, rendered from one template with the flags' thresholds: the flag and its alert
// judge with the same numbers, and a threshold changed for the flags changes the rules that are deployed with it.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { key } from '../../common/config.ts';
import { ConfigError } from '../../common/errors.ts';
import type { FlagThresholds } from '../../queries/index.ts';
import { externalUrl } from '../config.ts';

const TEMPLATE = new URL('./holdscope.rules.template.yml', import.meta.url);

/** A Prometheus job name the rules can name without quoting trouble in PromQL, YAML or a regex. */
const JOB_NAME = /^[A-Za-z0-9_.:/-]+$/;

/** `holdscope rules`: where the rules' links point and which scrape jobs are holdscope's. */
export const rulesConfigSchema = z.object({
  externalUrl: externalUrl(),
  /**
   * "holdscope": the job `holdscope start` is scraped as in the docs' Prometheus configuration. In production each
   * command is a job of its own (say holdscope-serve, holdscope-pipeline, holdscope-collector): name them all, or a
   * command down would not page.
   */
  job: key(
    z
      .string()
      .default('holdscope')
      .transform((text) =>
        text
          .split(',')
          .map((name) => name.trim())
          .filter((name) => name.length > 0),
      )
      .refine(
        (names) => names.length > 0 && names.every((name) => JOB_NAME.test(name)),
        'expected job names [A-Za-z0-9_.:/-] separated by commas',
      ),
    {
      help: 'Prometheus job name(s) holdscope is scraped as, for the down and absent alerts',
      env: 'HOLDSCOPE_PROMETHEUS_JOBS',
      placeholder: 'name,...',
    },
  ),
  /** Standard output unless given, so the rules can be piped or redirected. */
  output: key(z.string().min(1).optional(), { help: 'write the rules to this file instead of standard output', placeholder: 'file' }),
});
export type RulesConfig = z.output<typeof rulesConfigSchema>;

export interface RulesParameters {
  thresholds: FlagThresholds;
  /** Absolute base URL of the page (no trailing slash): runbook and dashboard links hang under it. */
  externalUrl: string;
  jobs: readonly string[];
}

/** Characters a base URL may hold to sit inside a double-quoted YAML string and a Go template unchanged. */
const URL_SAFE = /^[A-Za-z0-9\-._~:/@!$&'()*+,;=%[\]]+$/;

function checkedBaseUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.search || parsed.hash || !URL_SAFE.test(url) || url.endsWith('/'))
    throw new ConfigError(`--external-url: expected a base URL without query, fragment or trailing slash, got ${JSON.stringify(url)}`);
  return url;
}

/** The template's values: every threshold by its key, and the deployment's URL and jobs. */
function valuesOf(parameters: RulesParameters): Map<string, string> {
  const values = new Map<string, string>();
  for (const [name, value] of Object.entries(parameters.thresholds)) values.set(name, String(value));
  if (parameters.jobs.length === 0 || !parameters.jobs.every((job) => JOB_NAME.test(job)))
    throw new ConfigError(`--job: expected job names [A-Za-z0-9_.:/-], got ${JSON.stringify(parameters.jobs.join(','))}`);
  values.set('externalUrl', checkedBaseUrl(parameters.externalUrl));
  // A regex without backslashes, which a PromQL string would need doubled: '.' as '[.]'.
  values.set('jobs', parameters.jobs.map((job) => job.replaceAll('.', '[.]')).join('|'));
  return values;
}

/** The rules YAML for these thresholds, URL and jobs; the template's `##` notes are left out. */
export function renderAlertRules(parameters: RulesParameters, template = readFileSync(TEMPLATE, 'utf8')): string {
  const values = valuesOf(parameters);
  const body = template
    .split('\n')
    .filter((line) => !line.trimStart().startsWith('##'))
    .join('\n');
  return body.replace(/\$\{(\w*)\}/g, (_match, name: string) => {
    const value = values.get(name);
    if (value === undefined) throw new Error(`alert rules template: no value for \${${name}} (known: ${[...values.keys()].join(', ')})`);
    return value;
  });
}
