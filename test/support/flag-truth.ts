/**
 * Flags against the simulator's ground truth, shared by the tests that prove the detections (flags.test.ts, on one
 * node) and the ones that prove a deployment keeps them (the cluster run): every per-lifecycle flag raised is one the
 * truth has and none is missed, and every late write names the truth's victims and pages.
 */
import assert from 'node:assert/strict';
import { LifecycleFlag, type LifecycleTruth } from '../../emitter/index.ts';
import type { Flag } from '../../queries/index.ts';

const PER_LIFECYCLE: readonly string[] = Object.values(LifecycleFlag);

export const isLifecycleFlag = (flag: Flag): boolean => PER_LIFECYCLE.includes(flag.kind);

/** Precision and recall 1.0 for the per-lifecycle kinds; returns how many were raised. */
export function assertLifecycleFlagsEqualTruth(flags: readonly Flag[], truth: readonly LifecycleTruth[], label = ''): number {
  const raised = new Set(flags.filter(isLifecycleFlag).map((f) => `${f.kind} ${f.request_id}/${f.generation}`));
  const expected = new Set(truth.flatMap((t) => t.flags.map((k) => `${k} ${t.request_id}/${t.generation}`)));
  const falsePositives = [...raised].filter((x) => !expected.has(x));
  const missed = [...expected].filter((x) => !raised.has(x));
  assert.deepEqual({ falsePositives, missed }, { falsePositives: [], missed: [] }, `${label} flags against the truth`);
  return raised.size;
}

/** Each late_write flag's victims (request, generation, pages) and written pages are the truth's; returns the victims. */
export function assertLateWriteVictimsEqualTruth(flags: readonly Flag[], truth: readonly LifecycleTruth[]): number {
  const byKey = new Map(truth.map((t) => [`${t.request_id}/${t.generation}`, t]));
  let victims = 0;
  for (const flag of flags.filter((f) => f.kind === 'late_write')) {
    const t = byKey.get(`${flag.request_id}/${flag.generation}`);
    assert.ok(t, `late_write ${flag.request_id}/${flag.generation} has a true lifecycle`);
    const expected = new Map<string, number[]>();
    for (const w of t.late_writes)
      for (const v of w.victims) {
        const key = `${v.request_id}/${v.generation}`;
        expected.set(
          key,
          [...new Set([...(expected.get(key) ?? []), ...v.pages])].sort((a, b) => a - b),
        );
      }
    const got = new Map(
      (flag.evidence.victims as { request_id: string; generation: number; pages: number[] }[]).map((v) => [
        `${v.request_id}/${v.generation}`,
        [...v.pages].sort((a, b) => a - b),
      ]),
    );
    assert.deepEqual(got, expected, `victims of ${flag.request_id}/${flag.generation}`);
    // The sentence says what the evidence says: each owner named, or that no stored allocation owned the pages.
    if (expected.size === 0) assert.match(flag.summary, /no allocation stored so far owned those pages/, flag.summary);
    for (const owner of expected.keys()) assert.ok(flag.summary.includes(owner), `${owner} named in: ${flag.summary}`);
    assert.deepEqual(
      flag.evidence.pages,
      [...new Set(t.late_writes.flatMap((w) => w.pages))].sort((a, b) => a - b),
      `pages written late by ${flag.request_id}/${flag.generation}`,
    );
    victims += got.size;
  }
  return victims;
}
