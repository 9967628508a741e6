import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import { startHttpServer } from '../../dashboards/index.ts';
import { buildScenario, runSimulation, SCENARIO_NAMES, type LifecycleTruth } from '../../emitter/index.ts';
import { startKafkaMock, type KafkaMock } from '../support/kafka-mock.ts';
import { assertReadApiMatchesTruth, quietLog, startStack, waitForSpans } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

describe('end to end on embedded ClickHouse: simulator → collector → Kafka → pipeline → ClickHouse → read API', () => {
  let mock: KafkaMock;
  let client: ClickHouseClient;
  let api: { port: number; close(): Promise<void> };
  const database = `e2e_${Date.now().toString(36)}`;
  before(async () => {
    mock = await startKafkaMock({ brokers: 3 });
    client = await embeddedClickHouse();
  });
  after(async () => {
    await api?.close();
    await client?.close();
    await mock?.stop();
  });

  it('matches the ground truth for every lifecycle of every scenario', async () => {
    const stack = await startStack(mock, client, { database });
    api = await startHttpServer({ port: 0, host: '127.0.0.1', client, database, log: quietLog });
    try {
      let seed = 100;
      const all: LifecycleTruth[] = [];
      let spans = 0;
      for (const name of SCENARIO_NAMES) {
        const scenario = buildScenario(name, seed++);
        scenario.config.requests = name === 'mixed' ? 500 : 150;
        scenario.config.idPrefix = `${name}-${seed}`;
        const summary = await runSimulation({
          config: scenario.config,
          endpoint: stack.collectorUrl,
          startTimeMs: Date.now() - 3_600_000,
          pace: 'fast',
        });
        assert.equal(summary.spansFailed, 0);
        spans += summary.spansEmitted;
        all.push(...summary.truth);
      }
      await waitForSpans(client, database, spans);
      await stack.pipeline.flush();
      assert.ok(
        all.some((t) => t.late_writes.length > 0) &&
          all.some((t) => t.resolution === 'open') &&
          all.some((t) => t.resolution === 'timeout'),
      );
      await assertReadApiMatchesTruth(`http://127.0.0.1:${api.port}`, all);
      const unknown = await fetch(`http://127.0.0.1:${api.port}/api/lifecycles/${encodeURIComponent("no-such-id'; DROP TABLE x")}`);
      assert.equal(unknown.status, 404);
      assert.match(JSON.stringify(await unknown.json()), /no lifecycle/);
    } finally {
      await stack.stop();
    }
  });
});
