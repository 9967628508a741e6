import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Incident, IncidentReport } from '../../queries/index.ts';
import { IncidentTracker } from './tracker.ts';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();

function incident(id: string, lastComputedMs: number, violations = 1): Incident {
  return {
    id,
    cluster: 'c1',
    kind: 'late_write',
    severity: 'critical',
    culprit: { decode_engine: 'd0', decode_version: 'v1', prefill_engine: 'p0', prefill_version: 'v0', backend: 'nixl' },
    violations,
    firstSeen: iso(T0 - 10_000),
    lastSeen: iso(lastComputedMs - 500),
    lastComputedAt: iso(lastComputedMs),
    examples: [],
    sparkline: { bucketSeconds: 10, counts: [] },
    summary: `${violations} late write(s)`,
  };
}
const report = (...incidents: Incident[]): IncidentReport => ({ incidents, total: incidents.length });
const states = (due: { incident: Incident; state: string }[]) => due.map((a) => `${a.incident.id}:${a.state}`).sort();

describe('IncidentTracker', () => {
  const settings = { quietMs: 300_000, resendMs: 60_000, maxTracked: 10 };

  it('fires a new incident at once, re-sends it when changed (at most every 10 s) or after the resend interval', () => {
    const tracker = new IncidentTracker(settings);
    assert.deepEqual(states(tracker.step(report(incident('a', T0)), T0 + 100)), ['a:firing']);
    assert.deepEqual(tracker.step(report(incident('a', T0)), T0 + 1_000), [], 'unchanged: nothing due');
    assert.deepEqual(tracker.step(report(incident('a', T0 + 2_000, 2)), T0 + 2_100), [], 'changed, but sent 2 s ago');
    assert.deepEqual(states(tracker.step(report(incident('a', T0 + 11_000, 3)), T0 + 11_100)), ['a:firing'], 'changed, 11 s on');
    assert.equal(tracker.step(report(incident('a', T0 + 11_000, 3)), T0 + 11_200).length, 0);
    assert.deepEqual(states(tracker.step(report(incident('a', T0 + 11_000, 3)), T0 + 71_100)), ['a:firing'], 'resend');
    assert.equal(tracker.active, 1);
  });

  it('resolves once quiet, sends the resolution once, and fires again on a new record', () => {
    const tracker = new IncidentTracker(settings);
    tracker.step(report(incident('a', T0)), T0);
    const resolved = tracker.step(report(incident('a', T0)), T0 + 300_000);
    assert.deepEqual(states(resolved), ['a:resolved']);
    assert.equal(resolved[0]?.resolvedAtMs, T0 + 300_000);
    assert.deepEqual(tracker.step(report(incident('a', T0)), T0 + 400_000), [], 'resolved once, not again');
    assert.equal(tracker.active, 0);
    const again = tracker.step(report(incident('a', T0 + 500_000)), T0 + 500_100);
    assert.deepEqual(states(again), ['a:firing']);
    assert.equal(again[0]?.startsAtMs, T0 + 500_100, 'a new episode starts now');
  });

  it('resolves an incident gone from a complete lookup, but not from a capped one', () => {
    const tracker = new IncidentTracker(settings);
    tracker.step(report(incident('a', T0), incident('b', T0)), T0);
    assert.deepEqual(tracker.step({ incidents: [incident('a', T0)], total: 2 }, T0 + 1000), [], 'capped: b may still be there');
    assert.equal(tracker.untracked, 1);
    assert.deepEqual(states(tracker.step(report(incident('a', T0)), T0 + 2000)), ['b:resolved']);
  });

  it('after a failed lookup, keeps re-sending and resolving from what it knew', () => {
    const tracker = new IncidentTracker(settings);
    tracker.step(report(incident('a', T0)), T0);
    assert.deepEqual(states(tracker.step(undefined, T0 + 60_000)), ['a:firing']);
    assert.deepEqual(states(tracker.step(undefined, T0 + 300_000)), ['a:resolved']);
  });

  it('does not page for an incident already quiet when first seen (a restart), and bounds what it tracks', () => {
    const tracker = new IncidentTracker({ ...settings, maxTracked: 2 });
    const due = tracker.step(report(incident('old', T0 - 400_000), incident('a', T0), incident('b', T0)), T0);
    assert.deepEqual(states(due), ['a:firing']);
    assert.equal(tracker.untracked, 1, 'b is beyond the bound of 2 (old counts: it is remembered as resolved)');
  });
});
