import { writeFileSync } from 'node:fs';
import { loadConfig } from '../common/index.ts';
import { renderAlertRules, rulesConfigSchema } from '../dashboards/index.ts';
import { loadFlagThresholds } from '../queries/index.ts';

/**
 * `holdscope rules`: the Prometheus alerting rules for this deployment, with the flags' thresholds
 * (HOLDSCOPE_FLAG_THRESHOLDS, as `serve` and `start` read them), the page's URL and the scrape jobs.
 */
export function rulesCommand(flags: Record<string, unknown>): void {
  const config = loadConfig(rulesConfigSchema, flags);
  const rules = renderAlertRules({ thresholds: loadFlagThresholds(), externalUrl: config.externalUrl, jobs: config.job });
  if (config.output) writeFileSync(config.output, rules);
  else process.stdout.write(rules);
}
