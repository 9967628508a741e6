import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-sink.ts';
import { forEachSpan, lifecycleKeyId, validateSpan, type OtlpTraceRequest, type PdEvent } from '../../contract/index.ts';
import { buildScenario, runSimulation, type ScenarioName } from '../../emitter/index.ts';
import { comparable, deriveLifecycles } from '../support/lifecycles-from-spans.ts';

/** A real OTLP/HTTP receiver on a random port, keeping every decoded request. */
async function capture(): Promise<{ receiver: OtlpReceiver; requests: OtlpTraceRequest[] }> {
  const requests: OtlpTraceRequest[] = [];
  const receiver = await startOtlpReceiver({ port: 0, onRequest: (r) => void requests.push(r) });
  return { receiver, requests };
}

function validated(requests: OtlpTraceRequest[]): { events: PdEvent[]; invalid: string[] } {
  const events: PdEvent[] = [];
  const invalid: string[] = [];
  for (const request of requests) {
    forEachSpan(request, (span, resource) => {
      const result = validateSpan(span, resource);
      if (result.status === 'valid') events.push(result.event);
      else invalid.push(result.status === 'invalid' ? `${result.spanName}: ${result.reason}` : `not ours: ${span.name}`);
    });
  }
  return { events, invalid };
}

describe('simulator over OTLP/HTTP protobuf', () => {
  for (const [name, requests] of [
    ['mixed', 1500],
    ['late-write-bug', 1000],
    ['no-ack-backend', 600],
  ] as [ScenarioName, number][]) {
    it(`${name}: the truth agrees with the exported spans, lifecycle by lifecycle`, async () => {
      const { receiver, requests: received } = await capture();
      try {
        const scenario = buildScenario(name, 21);
        scenario.config.requests = requests;
        const startTimeMs = Date.UTC(2026, 0, 15, 12, 0, 0, 0);
        const summary = await runSimulation({ config: scenario.config, endpoint: receiver.url, startTimeMs, pace: 'fast', batchSize: 500 });
        assert.equal(summary.spansFailed, 0);
        assert.equal(summary.spansExported, summary.spansEmitted);
        const { events, invalid } = validated(received);
        assert.deepEqual(invalid, []);
        assert.equal(events.length, summary.spansEmitted, 'every emitted span arrived, once');
        const derived = deriveLifecycles(events, BigInt(startTimeMs) * 1_000_000n);
        assert.equal(derived.size, summary.truth.length);
        for (const truth of summary.truth) {
          const key = lifecycleKeyId(truth.cluster, truth.request_id, truth.generation);
          assert.deepEqual(derived.get(key), comparable(truth), `lifecycle ${truth.request_id}/${truth.generation}`);
        }
        assert.ok(summary.truth.some((t) => t.flags.length > 0) || name === 'no-ack-backend');
      } finally {
        await receiver.close();
      }
    });
  }
});

describe('holdscope simulate (CLI)', () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = (await capture()).receiver;
  });
  after(() => receiver.close());

  const cli = (args: string[]) =>
    spawnSync(process.execPath, ['bin/holdscope.js', 'simulate', ...args], {
      encoding: 'utf8',
      env: { ...process.env, HOLDSCOPE_LOG_LEVEL: 'warn' },
    });

  it('writes a byte-identical truth file for the same seed', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'holdscope-truth-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const run = (file: string) =>
      cli(['--scenario', 'mixed', '--seed', '5', '--requests', '300', '--endpoint', receiver.url, '--truth', join(dir, file)]);
    const first = run('a.jsonl');
    assert.equal(first.status, 0, first.stderr);
    assert.match(first.stdout, /spans emitted/);
    assert.equal(run('b.jsonl').status, 0);
    const a = readFileSync(join(dir, 'a.jsonl'), 'utf8');
    assert.ok(a.split('\n').length > 300);
    assert.equal(a, readFileSync(join(dir, 'b.jsonl'), 'utf8'));
  });

  it('rejects bad configuration naming the flag, the expectation and the value', () => {
    const bad = cli(['--rate', '-3', '--endpoint', 'not a url']);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--rate: expected a request rate > 0 \(requests\/s\), got "-3"/);
    assert.match(bad.stderr, /--endpoint: expected an http\(s\) URL, got "not a url"/);
    const scenario = cli(['--scenario', 'nope']);
    assert.notEqual(scenario.status, 0);
    assert.match(scenario.stderr, /nope/);
  });
});
