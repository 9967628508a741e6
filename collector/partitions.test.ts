import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeOtlpProtobuf, encodeOtlpProtobuf, forEachSpan, MESSAGE_HEADERS, type OtlpSpan } from '../contract/index.ts';
import { kafkajsPartition } from '../test/support/kafka-read.ts';
import { mergeByPartition } from './partitions.ts';

/** A span whose id and request id are all a reader needs here (the merge never decodes). */
function span(requestId: string, n: number): OtlpSpan {
  return {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: n.toString(16).padStart(16, '0'),
    parentSpanId: '',
    name: 'pd.hold',
    kind: 1,
    startTimeUnixNano: 1n,
    endTimeUnixNano: 2n,
    attributes: { 'pd.request.id': requestId },
    statusCode: 0,
    statusMessage: '',
  };
}

/** One message per lifecycle key, as triage makes them: `spans` spans each, under the resource of its engine. */
function messagesOf(keys: string[], spans: number) {
  let n = 0;
  return keys.map((key) => {
    const list = Array.from({ length: spans }, () => span(key, ++n));
    const value = Buffer.from(
      encodeOtlpProtobuf({
        resourceSpans: [{ resource: { 'service.name': key }, scopeSpans: [{ scope: { name: 's', version: '1' }, spans: list }] }],
      }),
    );
    return { key, value, headers: MESSAGE_HEADERS, spanIds: list.map((s) => s.spanId) };
  });
}

describe('mergeByPartition', () => {
  it("puts every span in its key's partition (kafkajs's choice), each once, one message per partition", () => {
    const keys = Array.from({ length: 60 }, (_, i) => `default/req-${i}`);
    const messages = messagesOf(keys, 3);
    const merged = mergeByPartition('t', messages, 7);
    assert.equal(new Set(merged.map((m) => m.partition)).size, merged.length, 'one message per partition');
    assert.ok(merged.length <= 7 && merged.length >= 5, `${merged.length} messages`);
    const seen = new Map<string, number>();
    for (const m of merged) {
      assert.deepEqual(m.headers, MESSAGE_HEADERS);
      forEachSpan(decodeOtlpProtobuf(m.value as Buffer), (s, resource) => {
        const key = s.attributes['pd.request.id'] as string;
        assert.equal(resource['service.name'], key, 'each span keeps its own resource');
        assert.equal(m.partition, kafkajsPartition(key, 7), `${key}'s partition`);
        assert.ok(!seen.has(s.spanId), `span ${s.spanId} twice`);
        seen.set(s.spanId, m.partition as number);
      });
    }
    assert.deepEqual([...seen.keys()].sort(), messages.flatMap((m) => m.spanIds).sort());
  });

  it("keeps a lifecycle's spans in their order, and the key only on a message of one lifecycle", () => {
    const messages = messagesOf(['default/a', 'default/a', 'default/b'], 2);
    const one = mergeByPartition('t', messages.slice(0, 2), 4);
    assert.equal(one.length, 1);
    assert.equal(one[0]!.key, 'default/a');
    const order: string[] = [];
    forEachSpan(decodeOtlpProtobuf(one[0]!.value as Buffer), (s) => order.push(s.spanId));
    assert.deepEqual(order, [...messages[0]!.spanIds, ...messages[1]!.spanIds]);
    // One partition for all: the key of a message holding two lifecycles would name only one of them.
    const both = mergeByPartition('t', messages, 1);
    assert.equal(both.length, 1);
    assert.equal(both[0]!.key, null);
  });
});
