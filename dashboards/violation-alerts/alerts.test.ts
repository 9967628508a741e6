import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../common/config.ts';
import type { Incident } from '../../queries/index.ts';
import { toAlertmanagerAlert } from './alerts.ts';
import { violationAlertsConfigSchema } from './config.ts';

const incident: Incident = {
  id: '0123456789abcdef',
  cluster: 'east',
  kind: 'ack_after_failed_send',
  severity: 'critical',
  culprit: { decode_engine: 'decode-1', decode_version: 'v2', prefill_engine: '', prefill_version: '', backend: 'mooncake' },
  violations: 7,
  firstSeen: '2026-01-01T00:00:00.000000000Z',
  lastSeen: '2026-01-01T00:05:00.123456789Z',
  lastComputedAt: '2026-01-01T00:05:01.000000000Z',
  examples: [{ request_id: 'r-1', generation: 2 }],
  sparkline: { bucketSeconds: 10, counts: [] },
  summary: '7 drain ack(s) sent after a failed send in cluster east: decode decode-1 (v2)',
};

describe('violation alerts as Alertmanager sees them', () => {
  const links = { externalUrl: 'https://holdscope.example/base', resendMs: 60_000 };
  const now = Date.parse('2026-01-01T00:06:00Z');

  it('labels are the incident key, with unknown for an empty value; links are absolute', () => {
    const alert = toAlertmanagerAlert({ incident, state: 'firing', startsAtMs: Date.parse(incident.firstSeen) }, now, links);
    assert.deepEqual(alert.labels, {
      alertname: 'HoldscopeAckAfterFailedSend',
      severity: 'critical',
      cluster: 'east',
      kind: 'ack_after_failed_send',
      decode_engine: 'decode-1',
      decode_version: 'v2',
      prefill_engine: 'unknown',
      prefill_version: 'unknown',
      backend: 'mooncake',
    });
    assert.equal(alert.annotations.runbook_url, 'https://holdscope.example/base/runbooks#holdscopeackafterfailedsend');
    const url = new URL(alert.generatorURL);
    assert.equal(alert.annotations.incident_url, alert.generatorURL);
    assert.equal(url.origin + url.pathname, 'https://holdscope.example/base/');
    assert.equal(url.hash, '#incident-0123456789abcdef');
    assert.equal(url.searchParams.get('from'), '2025-12-31T23:59:00.000Z');
    assert.equal(url.searchParams.get('to'), '2026-01-01T00:06:00.123Z');
    assert.equal(url.searchParams.get('cluster'), 'east');
    assert.equal(alert.annotations.summary, incident.summary);
    assert.match(alert.annotations.description ?? '', /^7 violation\(s\) .*r-1 \(generation 2\)/);
    assert.equal(alert.startsAt, '2026-01-01T00:00:00.000Z');
    assert.equal(alert.endsAt, new Date(now + 240_000).toISOString(), 'four resends ahead');
  });

  it('a resolved alert ends when it was resolved', () => {
    const resolvedAtMs = now - 1000;
    const alert = toAlertmanagerAlert(
      { incident, state: 'resolved', startsAtMs: Date.parse(incident.firstSeen), resolvedAtMs },
      now,
      links,
    );
    assert.equal(alert.endsAt, new Date(resolvedAtMs).toISOString());
  });

  it('the Alertmanager URLs are a comma-separated list of absolute http(s) URLs, none by default', () => {
    assert.deepEqual(loadConfig(violationAlertsConfigSchema, {}, {}).alertmanagerUrl, []);
    assert.deepEqual(
      loadConfig(violationAlertsConfigSchema, {}, { HOLDSCOPE_ALERTMANAGER_URLS: 'http://am-0:9093/, https://am-1:9093' }).alertmanagerUrl,
      ['http://am-0:9093', 'https://am-1:9093'],
    );
    assert.throws(() => loadConfig(violationAlertsConfigSchema, { alertmanagerUrl: 'am-0:9093' }, {}), /--alertmanager-url.*absolute/);
  });
});
