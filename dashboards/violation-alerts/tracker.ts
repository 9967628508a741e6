// Which alerts are due, from the incidents a lookup found and what was sent before: the rule engine of the push, kept
// apart from the I/O so that its decisions can be tested with a clock of the test's own.
import type { Incident, IncidentReport } from '../../queries/index.ts';
import type { AlertState } from './alerts.ts';

/**
 * Least time between two sends of a firing incident whose records keep being stored: Alertmanager already pages for it,
 * and only its counts move. During a storm of violations every lookup finds most incidents changed; sending them all
 * each time made each POST carry every active alert, and slowed the POST that carries a new incident (about 400 ms
 * against 15 ms at 20,000 spans/s on two cores, `npm run bench`).
 */
const UPDATE_GAP_MS = 10_000;

export interface TrackerSettings {
  /** Resolved once no record of the incident was stored for this long (ms). */
  quietMs: number;
  /** A firing alert is sent again after this long (ms). */
  resendMs: number;
  /** Incidents tracked at most; those beyond are counted as untracked and raise no alert. */
  maxTracked: number;
}

interface Tracked extends AlertState {
  /** The incident's lastComputedAt (ms): when it moves, one of its records was stored again. */
  lastComputedMs: number;
  sentAtMs: number;
}

export class IncidentTracker {
  private readonly tracked = new Map<string, Tracked>();
  /** Incidents of the last lookup beyond the bound. */
  untracked = 0;

  constructor(private readonly settings: TrackerSettings) {}

  /** Incidents firing now. */
  get active(): number {
    let n = 0;
    for (const t of this.tracked.values()) if (t.state === 'firing') n++;
    return n;
  }

  /**
   * The alerts to send at `nowMs`, from a lookup's report (undefined when the lookup failed: the alerts already firing
   * are then re-sent and resolved from what was known). New incidents fire at once, changed ones at most every
   * UPDATE_GAP_MS (their count in the annotations); firing ones are re-sent
   * every resend and resolved once quiet or gone from a complete lookup; a resolved one fires again on a new record.
   */
  step(report: IncidentReport | undefined, nowMs: number): AlertState[] {
    const due = new Set<Tracked>();
    if (report) this.observe(report, nowMs, due);
    for (const t of this.tracked.values()) {
      if (t.state !== 'firing') continue;
      if (nowMs - t.lastComputedMs >= this.settings.quietMs) {
        t.state = 'resolved';
        t.resolvedAtMs = nowMs;
        due.add(t);
      } else if (nowMs - t.sentAtMs >= this.settings.resendMs) due.add(t);
    }
    return [...due].map((t) => {
      t.sentAtMs = nowMs;
      return { incident: t.incident, state: t.state, startsAtMs: t.startsAtMs, resolvedAtMs: t.resolvedAtMs };
    });
  }

  private observe(report: IncidentReport, nowMs: number, due: Set<Tracked>): void {
    const seen = new Set<string>();
    let untracked = Math.max(0, report.total - report.incidents.length);
    for (const incident of report.incidents) {
      seen.add(incident.id);
      const known = this.tracked.get(incident.id);
      if (known) this.update(known, incident, nowMs, due);
      else if (this.tracked.size >= this.settings.maxTracked) untracked++;
      else this.track(incident, nowMs, due);
    }
    this.untracked = untracked;
    // A capped lookup leaves out the least recent incidents: absent is then no sign of an end.
    const complete = report.total <= report.incidents.length;
    for (const [id, t] of this.tracked) {
      if (seen.has(id)) continue;
      if (t.state === 'firing' && !complete) continue;
      if (t.state === 'firing') {
        t.state = 'resolved';
        t.resolvedAtMs = nowMs;
        due.add(t);
      }
      this.tracked.delete(id);
    }
  }

  /** A new incident fires unless its last record is older than the quiet period (as after a restart of holdscope). */
  private track(incident: Incident, nowMs: number, due: Set<Tracked>): void {
    const lastComputedMs = Date.parse(incident.lastComputedAt);
    const quiet = nowMs - lastComputedMs >= this.settings.quietMs;
    const t: Tracked = {
      incident,
      state: quiet ? 'resolved' : 'firing',
      startsAtMs: Math.min(Date.parse(incident.firstSeen), nowMs),
      resolvedAtMs: quiet ? nowMs : undefined,
      lastComputedMs,
      sentAtMs: nowMs,
    };
    this.tracked.set(incident.id, t);
    if (!quiet) due.add(t);
  }

  private update(t: Tracked, incident: Incident, nowMs: number, due: Set<Tracked>): void {
    t.incident = incident;
    const lastComputedMs = Date.parse(incident.lastComputedAt);
    if (!(lastComputedMs > t.lastComputedMs)) return;
    t.lastComputedMs = lastComputedMs;
    if (t.state === 'resolved' && nowMs - lastComputedMs < this.settings.quietMs) {
      t.state = 'firing';
      t.startsAtMs = nowMs;
      t.resolvedAtMs = undefined;
      due.add(t);
    } else if (t.state === 'firing' && nowMs - t.sentAtMs >= UPDATE_GAP_MS) due.add(t);
  }
}
