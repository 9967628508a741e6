/** Contract events written by hand, for tests of what the pipeline stores from them. */
import type { EngineRef, PdEvent } from '../../contract/index.ts';

/** Span text is untrusted: every character TabSeparated escapes, quotes, and UTF-8 of one to four bytes. */
export const HOSTILE_TEXT = ["a'b", 'tab\there', 'new\nline', 'cr\rhere', 'back\\slash', '\\N', '', 'ünïcødé ✓ 𝄞', 'x'.repeat(300)];

const engine = (text: string): EngineRef => ({
  role: 'decode',
  id: `decode-${text}`,
  version: text,
  backend: 'mooncake',
  capacitySlots: 4_294_967_295,
  experimentArm: text,
  experimentRun: '',
});

/** This module's load, in Unix nanoseconds, with a nanosecond digit that a millisecond clock would lose. */
const NOW_NS = BigInt(Date.now()) * 1_000_000n + 1n;

/** One span of every kind for a text, with the widest values their columns hold. */
export function pdEventsOfEveryKind(text: string, i: number): PdEvent[] {
  const base = {
    contractVersion: 1,
    cluster: `c-${text}`,
    requestId: `r${i}-${text}`,
    generation: i,
    engine: engine(text),
    traceId: `t${i}`,
    startNs: NOW_NS + BigInt(i), // within any retention
    endNs: 4_294_967_295_999_999_999n, // MAX_TIME_NS: the last time holdscope stores
  };
  const span = (n: number) => ({ ...base, spanId: `s${i}-${n}` });
  return [
    { ...span(0), name: 'pd.admission', outcome: 'rejected', reason: text },
    { ...span(1), name: 'pd.kv.alloc', pages: [0, 7, 4_294_967_295], slots: 3 },
    {
      ...span(2),
      name: 'pd.transfer',
      rank: -2_147_483_648,
      chunkIndex: 2_147_483_647,
      pages: [],
      status: 'ok',
      bytes: Number.MAX_SAFE_INTEGER,
      decodeEngineId: text,
    },
    { ...span(3), name: 'pd.handoff' },
    { ...span(4), name: 'pd.hold', expectedRanks: [0, 1], timeoutMs: 30_000, slots: 4, pages: [9] },
    { ...span(5), name: 'pd.drain', rank: 1, chunksDropped: 2, inflight: 3, failedSends: 4, ackWithheld: true, decodeEngineId: text },
    { ...span(6), name: 'pd.ack', rank: 0, ackGeneration: i + 1, accepted: false },
    { ...span(7), name: 'pd.timeout', missingRanks: [1], action: 'release' },
    { ...span(8), name: 'pd.release', reason: 'drained', pages: [1, 2] },
    { ...span(9), name: 'pd.checksum', outcome: 'mismatch' },
    { ...span(10), name: 'pd.cancel', targets: [text, `${text}2`, ''] },
  ] as PdEvent[];
}
