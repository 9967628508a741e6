import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { buildScenario, SCENARIO_NAMES } from '../../emitter/index.ts';

/** A cell's list of `code` names, [] for "none". */
const names = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

describe('docs/simulator.md against the scenarios', () => {
  it('says of each scenario what the code does: its description, distribution flags and alerts', () => {
    const markdown = readFileSync(new URL('../../docs/simulator.md', import.meta.url), 'utf8');
    const rows = new Map<string, string[]>();
    for (const line of markdown.split('\n')) {
      const cells = line.split('|').map((c) => c.trim());
      const name = /^`([a-z-]+)`$/.exec(cells[1] ?? '')?.[1];
      if (name && (SCENARIO_NAMES as readonly string[]).includes(name)) rows.set(name, cells.slice(2, 5));
    }
    assert.deepEqual([...rows.keys()], [...SCENARIO_NAMES]);
    for (const name of SCENARIO_NAMES) {
      const scenario = buildScenario(name);
      const [description, flags, alerts] = rows.get(name) as string[];
      assert.equal(description, scenario.description, `${name}: description`);
      assert.deepEqual(names(flags ?? ''), scenario.expectedDistributionFlags, `${name}: distribution flags`);
      if (scenario.expectedAlerts?.length === 0) assert.equal(alerts, 'no critical alert, not even pending', `${name}: alerts`);
      else if (scenario.expectedAlerts) assert.deepEqual(names(alerts ?? ''), scenario.expectedAlerts, `${name}: alerts`);
      else assert.equal(alerts, 'not checked end to end', `${name}: alerts`);
    }
  });
});
