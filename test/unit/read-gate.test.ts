import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { UnavailableError, httpStatusOf } from '../../common/index.ts';
import { createRequestMetrics } from '../../dashboards/request-metrics.ts';
import { ReadGate, readGateStats } from '../../queries/index.ts';

describe('read gate: bounded concurrency with a bounded queue', () => {
  it('runs at most maxConcurrent at once, the rest in arrival order', async () => {
    const gate = new ReadGate(2, 10);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const release = await gate.acquire();
        running++;
        peak = Math.max(peak, running);
        order.push(i);
        await sleep(5);
        running--;
        release();
      }),
    );
    assert.equal(peak, 2);
    assert.deepEqual(order, [0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('refuses at once, as 503 with Retry-After, when the queue is full; a freed turn goes to the next in line', async () => {
    const gate = new ReadGate(1, 2);
    const before = readGateStats().refused;
    const first = await gate.acquire();
    const second = gate.acquire();
    const third = gate.acquire();
    const refused = await gate.acquire().then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(refused instanceof UnavailableError && refused.code === 'READS_BUSY', String(refused));
    const answer = httpStatusOf(refused);
    assert.equal(answer.status, 503);
    assert.ok((answer.retryAfterMs ?? 0) >= 1000);
    assert.equal(readGateStats().refused, before + 1);
    first();
    (await second)();
    (await third)();
    assert.equal((await Promise.race([gate.acquire(), sleep(100).then(() => 'stuck')])) instanceof Function, true, 'a turn is free again');
  });

  it('lets a waiter leave the queue when its request is abandoned', async () => {
    const gate = new ReadGate(1, 1);
    const held = await gate.acquire();
    const controller = new AbortController();
    const abandoned = gate.acquire(controller.signal);
    controller.abort(new Error('sibling failed'));
    await assert.rejects(abandoned, /sibling failed/);
    // Its place is free: another may wait, and gets the turn.
    const next = gate.acquire();
    held();
    (await next)();
  });

  it('shows running, waiting and refused reads on /metrics', async () => {
    const registry = new Registry();
    const metrics = createRequestMetrics(registry);
    const gate = new ReadGate(1, 0);
    const held = await gate.acquire();
    await assert.rejects(gate.acquire(), UnavailableError);
    try {
      const text = await registry.metrics();
      assert.match(text, /^holdscope_read_queries_running [1-9]\d*$/m);
      assert.match(text, /^holdscope_read_queries_waiting 0$/m);
      assert.equal(Number(/^holdscope_read_queries_refused_total (\d+)$/m.exec(text)?.[1]), readGateStats().refused);
      assert.ok(readGateStats().refused > 0);
    } finally {
      held();
      metrics.close();
    }
  });
});
