import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ClickHouseClient } from '../../common/index.ts';
import type { ScenarioName, SimConfig } from '../../emitter/index.ts';
import { computeFlags, type Flag } from '../../queries/index.ts';
import { loadScenario } from '../support/load.ts';
import { randomDatabase } from '../support/stack.ts';
import { embeddedClickHouse } from '../support/embedded-clickhouse.ts';

const DISTRIBUTION = ['timeout_heavy', 'pairing_incompatible', 'long_transfer_tail', 'kv_capacity_exhaustion'];

describe('distribution flags fire on the scenario built to provoke them and stay silent on steady', () => {
  let client: ClickHouseClient;
  before(async () => {
    client = await embeddedClickHouse();
  });
  after(() => client?.close());

  async function flagsOf(name: ScenarioName, seed: number, adjust: (c: SimConfig) => void = () => undefined): Promise<Flag[]> {
    const database = randomDatabase('dist');
    const run = await loadScenario(client, database, name, seed, adjust);
    const { flags } = await computeFlags(client, database, {
      from: new Date(run.startTimeMs - 60_000).toISOString(),
      to: new Date(run.startTimeMs + 900_000).toISOString(),
    });
    return flags.filter((f) => DISTRIBUTION.includes(f.kind));
  }

  const kinds = (flags: Flag[]) => new Set(flags.map((f) => f.kind));

  for (const seed of [1, 2]) {
    it(`steady, seed ${seed}: no distribution flag`, async () => {
      assert.deepEqual(await flagsOf('steady', seed), []);
    });
  }

  it('no-ack-backend: timeout_heavy and pairing_incompatible on the backend without the ack protocol', async () => {
    const flags = await flagsOf('no-ack-backend', 3);
    assert.ok(kinds(flags).has('timeout_heavy') && kinds(flags).has('pairing_incompatible'), JSON.stringify([...kinds(flags)]));
    const pairing = flags.find((f) => f.kind === 'pairing_incompatible') as Flag;
    assert.equal(pairing.scope?.backend, 'nixl');
    assert.ok((pairing.sample_size ?? 0) >= 20 && (pairing.value ?? 0) >= 0.95);
    for (const f of flags.filter((x) => x.kind === 'timeout_heavy')) assert.ok((f.sample_size ?? 0) >= 20);
  });

  it('ack-loss: timeout_heavy per decode engine', async () => {
    const flags = await flagsOf('ack-loss', 4);
    assert.ok(flags.some((f) => f.kind === 'timeout_heavy' && f.scope?.decode_engine));
    assert.ok(!kinds(flags).has('pairing_incompatible'), 'acks are lost, not absent: the pairing still drains mostly');
  });

  it('late-write-bug: long_transfer_tail, critical because tails outlast the 300 ms timeout', async () => {
    const flags = await flagsOf('late-write-bug', 5);
    const tails = flags.filter((f) => f.kind === 'long_transfer_tail');
    assert.ok(tails.length > 0);
    assert.ok(tails.every((f) => f.severity === 'critical' && (f.value ?? 0) >= (f.threshold ?? Infinity)));
  });

  it('abort-storm with a long hold timeout: kv_capacity_exhaustion on a decode engine', async () => {
    const flags = await flagsOf('abort-storm', 6, (c) => {
      // Half the scenario's load and capacity, so the test stays quick; the storm's shape and time are unchanged.
      c.rate = 50;
      c.requests = 5000;
      for (const d of c.decode) {
        d.holdTimeoutMs = 300_000;
        d.capacityPages = 7000;
      }
    });
    const kv = flags.filter((f) => f.kind === 'kv_capacity_exhaustion');
    assert.ok(kv.length > 0, JSON.stringify(flags.map((f) => f.kind)));
    for (const f of kv) {
      assert.ok((f.value ?? 0) >= 0.2);
      assert.ok((f.evidence.aborts as number) >= 3 * (f.evidence.trailing_median_aborts as number));
    }
  });
});
