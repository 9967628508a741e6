import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chartRow, compareSpec } from '../../dashboards/charts/compare.ts';
import { renderSvg } from '../../dashboards/charts/render.ts';
import type { ArmReport, ComparisonReport, MetricComparison } from '../../queries/index.ts';

const share = (over: Partial<MetricComparison> = {}): MetricComparison => ({
  metric: 'timeout_share',
  label: 'timeout share (of resolved holds)',
  unit: 'share',
  direction: 'lower-is-better',
  baseline: 0.02,
  candidate: 0.12,
  difference: 0.1,
  interval: { lower: 0.05, upper: 0.15, confidence: 0.95 },
  method: 'newcombe-hybrid-score',
  verdict: 'worse',
  ...over,
});

const arm = (description: string): ArmReport => ({
  selector: { filters: {}, from: '', to: '', fromMs: 0, toMs: 0 },
  description,
  summary: {
    holds: 10,
    drained: 10,
    timeouts: 0,
    open: 0,
    lateWrites: 0,
    unsafeReleases: 0,
    tails: 10,
    peakPinnedShare: null,
    stormWindows: 0,
    drainSampled: 10,
    tailSampled: 10,
  },
});

describe('the Compare chart (dashboards/charts/compare.ts)', () => {
  it('shows a share difference in percentage points, its interval and verdict', () => {
    const row = chartRow(share());
    assert.ok(row);
    assert.equal(row.label, 'timeout share (of resolved holds) (pp)');
    assert.ok(Math.abs(row.difference - 10) < 1e-9);
    assert.deepEqual(
      [row.plotLower, row.plotUpper].map((x) => Math.round(x * 1e6) / 1e6),
      [5, 15],
    );
    assert.equal(row.text, '+10.00 [+5.00, +15.00]');
    assert.equal(row.verdict, 'worse');
  });

  it('runs an unbounded side (Infinity in process, null from JSON) past everything known, and says ∞', () => {
    for (const lower of [-Infinity, null as unknown as number]) {
      const row = chartRow({
        ...share(),
        metric: 'tail_p99_ms',
        label: 'transfer tail p99',
        unit: 'ms',
        difference: 20,
        interval: { lower, upper: 40, confidence: 0.95 },
        verdict: 'no detectable difference',
        minimumDetectableDifference: Infinity,
      });
      assert.ok(row);
      assert.equal(row.lower, null);
      assert.ok(row.plotLower < 0, `drawn left of zero: ${row.plotLower}`);
      assert.equal(row.plotUpper, 40);
      assert.equal(row.text, '+20.0 [−∞, +40.0] · MDD ±∞');
      assert.equal(row.mdd, null);
    }
  });

  it('a metric without a difference is no row; one without an interval is a point', () => {
    assert.equal(chartRow(share({ difference: null, interval: null, verdict: null, note: 'no holds in candidate' })), null);
    const peak = chartRow(share({ interval: null, verdict: null, method: null, difference: -0.05 }));
    assert.equal(peak?.verdict, 'no interval');
    assert.equal(peak?.text, '−5.00 (no interval)');
  });

  it('draws every judged metric (not the count of holds), arms by selector, the comparison kept beside the spec', async () => {
    const evil = 'decode_engine=<img src=x onerror=alert(1)>';
    const report: ComparisonReport = {
      baseline: arm(evil),
      candidate: arm('decode_engine=decode-1'),
      confidence: 0.95,
      sampleSize: 20_000,
      metrics: [
        { ...share(), metric: 'holds', label: 'holds', unit: 'holds', direction: null, interval: null, verdict: null, method: null },
        share(),
        share({
          metric: 'open_share',
          label: 'open holds share',
          difference: null,
          interval: null,
          verdict: null,
          note: `no holds in baseline (${evil})`,
        }),
      ],
    };
    const spec = compareSpec(report) as unknown as { vconcat: unknown[]; usermeta: { comparison: ComparisonReport } };
    assert.equal(spec.vconcat.length, 2);
    assert.equal(spec.usermeta.comparison, report);
    const svg = await renderSvg(compareSpec(report));
    assert.ok(!svg.includes('<img'));
    assert.ok(svg.includes('baseline: decode_engine=&lt;img src=x onerror=alert(1)&gt;'));
    assert.ok(svg.includes('not compared: no holds in baseline (decode_engine=&lt;img'));
    assert.ok(svg.includes('fill="#c9302c"'), 'the worse metric in red');
  });
});
