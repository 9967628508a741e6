import { z } from 'zod';
import { intAtLeast, key } from '../../common/config.ts';

/** Absolute http(s) URLs given as one comma-separated text, without trailing slashes; none when absent. */
const urlList = () =>
  z
    .string()
    .optional()
    .transform((s) =>
      (s ?? '')
        .split(',')
        .map((u) => u.trim().replace(/\/+$/, ''))
        .filter((u) => u.length > 0),
    )
    .refine(
      (list) => list.every((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol)),
      'expected absolute http(s) URLs, comma-separated',
    );

/** Where and how often the per-lifecycle violations are pushed to Alertmanager (`holdscope start` and `serve`). */
export const violationAlertsConfigSchema = z.object({
  /**
   * None by default: pushing is opt-in, and the fallback rules (holdscope_violation_push_enabled != 1) cover a
   * deployment without it. Several for an HA pair (`--alertmanager-url http://am-0:9093,http://am-1:9093`): each gets
   * every alert, as Prometheus sends to each.
   */
  alertmanagerUrl: key(urlList(), {
    help: 'Alertmanager base URLs to push violation alerts to (API v2), comma-separated; none: no push',
    env: 'HOLDSCOPE_ALERTMANAGER_URLS',
    placeholder: 'url,...',
  }),
  /**
   * 1 s: in `start` a stored record nudges a lookup at once, so this only bounds the delay of `serve` (a separate
   * process, which polls) and of a nudge lost; one small indexed read a second is nothing beside the pages' reads.
   */
  alertPollMs: key(intAtLeast(100).default(1000), {
    help: 'how often to look for new violations when not nudged by a stored record',
    env: 'HOLDSCOPE_ALERT_POLL_MS',
    placeholder: 'ms',
  }),
  /**
   * 60 s, Prometheus' resend delay: an active alert is sent with endsAt four resends ahead, so Alertmanager keeps it
   * through three lost sends, and lets it expire on its own when holdscope is gone.
   */
  alertResendMs: key(intAtLeast(1000).default(60_000), {
    help: 'how often an active violation alert is sent again',
    env: 'HOLDSCOPE_ALERT_RESEND_MS',
    placeholder: 'ms',
  }),
  /**
   * 5 minutes: violations of one culprit come in bursts seconds apart (an abort storm, a bad rollout), so a shorter
   * pause would resolve and re-page the same incident; longer keeps a fixed incident open past the fix.
   */
  alertQuietMs: key(intAtLeast(1000).default(300_000), {
    help: 'an alert is resolved once no record of its incident was stored for this long',
    env: 'HOLDSCOPE_ALERT_QUIET_MS',
    placeholder: 'ms',
  }),
  /** 5 s: Alertmanager answers a POST in milliseconds; longer means it is down or partitioned, and the retry takes over. */
  alertPushTimeoutMs: key(intAtLeast(100).default(5000), {
    help: 'how long one POST to an Alertmanager may take',
    env: 'HOLDSCOPE_ALERT_PUSH_TIMEOUT_MS',
    placeholder: 'ms',
  }),
});
export type ViolationAlertsConfig = z.output<typeof violationAlertsConfigSchema>;
