import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import type { LifecycleTruth, SimConfig } from '../../emitter/index.ts';
import { loadScenario } from '../support/load.ts';
import { randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

/** One run of an experiment: its label on every engine (none for `unlabelled`), its seed and its request ids' prefix. */
interface Run {
  prefix: string;
  seed: number;
  experiment?: { arm: string; run: string };
}

const RUNS: Run[] = [
  { prefix: 'arm-a-1', seed: 201, experiment: { arm: 'baseline', run: 'run-1' } },
  { prefix: 'arm-a-2', seed: 202, experiment: { arm: 'baseline', run: 'run-2' } },
  { prefix: 'arm-b-1', seed: 203, experiment: { arm: 'fix', run: 'run-1' } },
  { prefix: 'unlabelled', seed: 204 },
];

/** A short steady run with many aborts, so that each run has holds; its own request ids, and its run's label. */
const runConfig =
  (run: Run) =>
  (c: SimConfig): void => {
    c.requests = 300;
    c.aborts.probability = 0.4;
    c.idPrefix = run.prefix;
    if (run.experiment) c.experiment = run.experiment;
  };

const keyOf = (r: { cluster: string; request_id: string; generation: number | string }) =>
  `${r.cluster}/${r.request_id}/${Number(r.generation)}`;

interface ArmRow {
  cluster: string;
  request_id: string;
  generation: number;
  experiment_arm: string;
  experiment_run: string;
}

describe('experiment arms: lifecycle_arms holds each lifecycle its decode engine labelled (chdb embedded)', { timeout: 180_000 }, () => {
  let client: ClickHouseClient;
  const database = randomDatabase('arms');
  const truths = new Map<string, { run: Run; truth: LifecycleTruth[] }>();

  const query = async <T>(sql: string): Promise<T[]> => (await client.query({ query: sql, format: 'JSONEachRow' })).json<T>();
  /** What readers read: one row per lifecycle key, whatever rows and partitions the key's arms sit in. */
  const arms = async (): Promise<Map<string, ArmRow>> => {
    const rows = await query<ArmRow>(
      `SELECT cluster, request_id, generation, max(experiment_arm) AS experiment_arm, max(experiment_run) AS experiment_run
       FROM ${database}.lifecycle_arms GROUP BY cluster, request_id, generation`,
    );
    return new Map(rows.map((r) => [keyOf(r), r]));
  };

  before(async () => {
    client = await embeddedClickHouse();
    for (const run of RUNS) {
      const { truth } = await loadScenario(client, database, 'steady', run.seed, runConfig(run));
      truths.set(run.prefix, { run, truth });
    }
  });
  after(() => client?.close());

  it('every held lifecycle of every labelled run has its arm and run; every row is a lifecycle of its run', async (t) => {
    const stored = await arms();
    const expected = new Map<string, Run>();
    let held = 0;
    for (const { run, truth } of truths.values()) {
      for (const life of truth) {
        expected.set(keyOf(life), run);
        if (life.resolution === 'none' || !run.experiment) continue;
        held++;
        const row = stored.get(keyOf(life));
        assert.ok(row, `held lifecycle ${keyOf(life)} of ${run.prefix} has no arm`);
        assert.deepEqual([row.experiment_arm, row.experiment_run], [run.experiment.arm, run.experiment.run], keyOf(life));
      }
    }
    assert.ok(held >= 3 * 20, `${held} held lifecycles in the labelled runs`);
    for (const [key, row] of stored) {
      const run = expected.get(key);
      assert.ok(run?.experiment, `${key}: a row for a lifecycle of no labelled run (${run?.prefix ?? 'unknown'})`);
      assert.deepEqual([row.experiment_arm, row.experiment_run], [run.experiment.arm, run.experiment.run], key);
    }
    // Per arm and run, as compare groups them: the three labelled runs, each with its own lifecycles.
    const perRun = new Map<string, number>();
    for (const row of stored.values())
      perRun.set(`${row.experiment_arm}/${row.experiment_run}`, (perRun.get(`${row.experiment_arm}/${row.experiment_run}`) ?? 0) + 1);
    assert.deepEqual([...perRun.keys()].sort(), ['baseline/run-1', 'baseline/run-2', 'fix/run-1']);
    t.diagnostic(`${stored.size} lifecycles with an arm (${held} held): ${JSON.stringify(Object.fromEntries(perRun))}`);
  });

  it('has a row for exactly the lifecycles whose decode spans carry a label, and none for unlabelled spans', async () => {
    const stored = await arms();
    const labelled = await query<{ cluster: string; request_id: string; generation: number }>(
      `SELECT DISTINCT cluster, request_id, generation FROM ${database}.spans WHERE engine_role = 'decode' AND experiment_arm != ''`,
    );
    assert.deepEqual([...stored.keys()].sort(), labelled.map(keyOf).sort());
    const unlabelled = truths.get('unlabelled')?.truth ?? [];
    assert.ok(unlabelled.length > 0);
    assert.ok(
      unlabelled.every((life) => !stored.has(keyOf(life))),
      'an unlabelled lifecycle has an arm',
    );
    // The labels reach the spans of every role, and unlabelled engines store the column's default.
    const byRun = await query<{ unlabelled_run: number; unarmed: string; armed: string; roles: string }>(
      `SELECT startsWith(request_id, 'unlabelled') AS unlabelled_run, countIf(experiment_arm = '' OR experiment_run = '') AS unarmed,
              countIf(experiment_arm != '' OR experiment_run != '') AS armed, uniqExact(engine_role) AS roles
       FROM ${database}.spans GROUP BY unlabelled_run ORDER BY unlabelled_run`,
    );
    assert.deepEqual(
      byRun.map((r) => [Number(r.unlabelled_run), Number(r.roles), Number(r.unarmed) === 0, Number(r.armed) === 0]),
      [
        [0, 3, true, false],
        [1, 3, false, true],
      ],
    );
  });

  it('a replay of the labelled spans leaves the same arms', async () => {
    const before = await arms();
    const stored = async () => Number((await query<{ n: string }>(`SELECT count() AS n FROM ${database}.lifecycle_arms`))[0]?.n);
    // Merges stopped, so that the replay's rows are seen to arrive rather than folded away already.
    await client.command({ query: `SYSTEM STOP MERGES ${database}.lifecycle_arms` });
    try {
      const rowsBefore = await stored();
      await client.command({ query: `INSERT INTO ${database}.spans SELECT * FROM ${database}.spans WHERE experiment_arm != ''` });
      assert.ok((await stored()) >= rowsBefore + before.size, 'the replay went through the view');
    } finally {
      await client.command({ query: `SYSTEM START MERGES ${database}.lifecycle_arms` });
    }
    const after = await arms();
    const labels = (m: Map<string, ArmRow>) => [...m].map(([key, r]) => [key, r.experiment_arm, r.experiment_run]).sort();
    assert.deepEqual(labels(after), labels(before));
  });
});
