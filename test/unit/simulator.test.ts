import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  buildScenario,
  ClusterModel,
  formatTruth,
  LifecycleFlag,
  SCENARIO_NAMES,
  type LifecycleTruth,
  type ScenarioName,
  type SimConfig,
} from '../../emitter/index.ts';
import { recordingSink, type RecordedSpan } from '../support/recording-sink.ts';

function simulate(
  name: ScenarioName,
  seed: number,
  requests?: number,
  requestIds?: SimConfig['requestIds'],
): { truth: LifecycleTruth[]; spans: RecordedSpan[] } {
  const scenario = buildScenario(name, seed);
  if (requests !== undefined) scenario.config.requests = requests;
  if (requestIds !== undefined) scenario.config.requestIds = requestIds;
  const { sink, spans } = recordingSink();
  const model = new ClusterModel(scenario.config, sink);
  assert.equal(model.runUntil(Number.POSITIVE_INFINITY), false, 'the model runs until nothing is left to do');
  return { truth: model.truth(), spans };
}

const count = <T>(items: T[], pred: (t: T) => boolean) => items.filter(pred).length;
const held = (truth: LifecycleTruth[]) => truth.filter((t) => t.resolution !== 'none');

describe('simulator determinism', () => {
  it('gives a byte-identical truth for the same seed and a different one for another seed', () => {
    const a = formatTruth(simulate('mixed', 11, 800).truth);
    const b = formatTruth(simulate('mixed', 11, 800).truth);
    const c = formatTruth(simulate('mixed', 12, 800).truth);
    assert.ok(a.length > 10_000);
    assert.equal(a, b);
    assert.notEqual(a, c);
  });

  it('emits the same spans in the same order for the same seed', () => {
    const a = simulate('late-write-bug', 5, 400).spans;
    const b = simulate('late-write-bug', 5, 400).spans;
    assert.deepEqual(a, b);
  });
});

describe('random request ids', () => {
  it('names requests as vLLM does, in no order, and changes nothing else', () => {
    const sequential = simulate('mixed', 11, 800).truth;
    const random = simulate('mixed', 11, 800, 'random').truth;
    const ids = random.map((t) => t.request_id);
    assert.equal(
      ids.find((id) => !/^cmpl-[0-9a-f]{32}$/.test(id)),
      undefined,
      'every id is cmpl- and 32 hex digits',
    );
    assert.equal(new Set(ids).size, new Set(sequential.map((t) => t.request_id)).size);
    const firsts = [...new Set(ids)];
    assert.notDeepEqual(firsts, [...firsts].sort(), 'arrival order is not id order');
    // The same lifecycles, flags and times: only the names differ, wherever a line names a request (late writes name
    // their victims; retries keep their request's id).
    const rename = new Map(sequential.map((t, i) => [t.request_id, random[i]?.request_id]));
    const renamed = formatTruth(sequential).replace(/"s11-\d{6}"/g, (id) => JSON.stringify(rename.get(JSON.parse(id) as string)));
    assert.deepEqual(renamed.split('\n').sort(), formatTruth(random).split('\n').sort());
    assert.deepEqual(simulate('mixed', 11, 800, 'random').truth, random, 'the same seed gives the same ids');
  });
});

describe('scenario statistics', () => {
  it('steady: every hold drains and no lifecycle carries a flag', () => {
    const { truth } = simulate('steady', 3);
    const holds = held(truth);
    assert.ok(holds.length >= 20, `expected aborts to produce holds, got ${holds.length}`);
    assert.equal(
      count(holds, (t) => t.resolution === 'drained'),
      holds.length,
    );
    assert.deepEqual(
      truth.flatMap((t) => t.flags),
      [],
    );
  });

  it('no-ack-backend: every abort resolves by timeout and no rank ever drains', () => {
    const { truth, spans } = simulate('no-ack-backend', 4);
    const holds = held(truth);
    assert.ok(holds.length >= 50);
    assert.equal(
      count(holds, (t) => t.resolution === 'timeout'),
      holds.length,
    );
    assert.equal(
      count(spans, (s) => s.method === 'drained' || s.method === 'ackReceived'),
      0,
    );
    for (const t of holds) assert.equal(t.hold_ms, 30_000);
  });

  it('abort-storm: some one-second window has at least 3x the median abort rate', () => {
    const { spans } = simulate('abort-storm', 6);
    const perSecond = new Map<number, number>();
    for (const s of spans)
      if (s.method === 'cancelled') perSecond.set(Math.floor(s.startUs / 1e6), (perSecond.get(Math.floor(s.startUs / 1e6)) ?? 0) + 1);
    const rates = [...perSecond.values()].sort((x, y) => x - y);
    const median = rates[Math.floor(rates.length / 2)] as number;
    const peak = rates[rates.length - 1] as number;
    assert.ok(median > 0);
    assert.ok(peak >= 3 * median, `peak ${peak}/s against median ${median}/s`);
  });

  it('ack-loss: a large share of holds waits out the timeout, the rest drain', () => {
    const holds = held(simulate('ack-loss', 7).truth);
    const timeouts = count(holds, (t) => t.resolution === 'timeout');
    assert.ok(holds.length >= 100);
    assert.ok(timeouts / holds.length > 0.2 && timeouts / holds.length < 0.9, `timeout share ${timeouts}/${holds.length}`);
    for (const t of holds.filter((h) => h.resolution === 'timeout')) assert.ok(t.missing_ranks.length > 0);
  });

  it('late-write-bug: writes land after timeout releases, onto pages another generation owns', () => {
    const { truth, spans } = simulate('late-write-bug', 8);
    const late = truth.filter((t) => t.late_writes.length > 0);
    assert.ok(late.length >= 10, `late-writing lifecycles: ${late.length}`);
    for (const t of late) {
      assert.equal(t.resolution, 'timeout');
      assert.ok(t.flags.includes(LifecycleFlag.lateWrite) && t.flags.includes(LifecycleFlag.unsafeRelease));
      for (const w of t.late_writes) assert.ok(w.completed_ms > (t.release_ms as number));
    }
    const victims = late.flatMap((t) => t.late_writes.flatMap((w) => w.victims.map((v) => ({ w, v, t }))));
    assert.ok(victims.length >= 5, `victim writes: ${victims.length}`);
    // Each victim had allocated the very pages the late write hit, before it landed.
    for (const { w, v, t } of victims) {
      const alloc = spans.find((s) => s.method === 'kvAllocated' && s.req.requestId === v.request_id && s.req.generation === v.generation);
      assert.ok(alloc, `victim ${v.request_id}/${v.generation} allocated`);
      assert.equal(alloc.engineId, t.decode_engine);
      assert.ok(alloc.startUs <= w.completed_ms * 1000);
      for (const page of v.pages) assert.ok((alloc.attrs.pages as number[]).includes(page) && w.pages.includes(page));
    }
  });

  it('mixed: every per-lifecycle flag kind occurs', () => {
    const { truth } = simulate('mixed', 9);
    const kinds = new Set(truth.flatMap((t) => t.flags));
    for (const kind of Object.values(LifecycleFlag)) assert.ok(kinds.has(kind), `mixed lacks ${kind}`);
  });

  it('every scenario builds and its truth resolutions are consistent with its release reasons', () => {
    for (const name of SCENARIO_NAMES) {
      const { truth } = simulate(name, 2, 300);
      for (const t of truth) {
        if (t.resolution === 'drained' || t.resolution === 'timeout') assert.equal(t.release_reason, t.resolution);
        if (t.resolution === 'none') assert.equal(t.hold_start_ms, null);
        if (t.resolution === 'open') assert.equal(t.release_ms, null);
      }
    }
  });
});
