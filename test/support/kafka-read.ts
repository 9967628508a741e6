import { Partitioners, type Kafka, type KafkaMessage, type PartitionMetadata } from 'kafkajs';

export interface ReadMessage {
  partition: number;
  offset: string;
  key: string | null;
  value: Buffer;
  headers: Record<string, string>;
}

/**
 * Reads a topic from the beginning up to the high watermarks it has now, through a consumer group of its own.
 * Deterministic: it stops when every partition reached the offsets fetched at the start, not after a quiet spell.
 */
export async function readTopic(kafka: Kafka, topic: string, timeoutMs = 30_000): Promise<ReadMessage[]> {
  const admin = kafka.admin();
  await admin.connect();
  const highs = new Map<number, bigint>();
  try {
    for (const p of await admin.fetchTopicOffsets(topic)) highs.set(p.partition, BigInt(p.high));
  } finally {
    await admin.disconnect();
  }
  const remaining = new Set([...highs].filter(([, high]) => high > 0n).map(([p]) => p));
  const out: ReadMessage[] = [];
  if (remaining.size === 0) return out;
  const consumer = kafka.consumer({
    groupId: `read-${topic}-${Math.random().toString(36).slice(2)}`,
    sessionTimeout: 6000,
    heartbeatInterval: 1000,
  });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`readTopic ${topic}: partitions ${[...remaining].join(',')} not read within ${timeoutMs} ms`)),
        timeoutMs,
      );
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const high = highs.get(batch.partition) ?? 0n;
            for (const m of batch.messages as KafkaMessage[]) {
              if (BigInt(m.offset) >= high) continue;
              const headers: Record<string, string> = {};
              for (const [k, v] of Object.entries(m.headers ?? {})) headers[k] = String(v);
              out.push({
                partition: batch.partition,
                offset: m.offset,
                key: m.key?.toString() ?? null,
                value: m.value ?? Buffer.alloc(0),
                headers,
              });
              if (BigInt(m.offset) + 1n >= high) remaining.delete(batch.partition);
            }
            if (remaining.size === 0) {
              clearTimeout(timer);
              resolve();
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return out;
}

/**
 * The partition kafkajs's default partitioner (Kafka's own, murmur2) gives a keyed message among `partitions`: where
 * a lifecycle's spans belong. Computed here, not taken from the collector, so a test checks the collector against it.
 */
export function kafkajsPartition(key: string, partitions: number): number {
  const partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({ partitionId, leader: 1 })) as PartitionMetadata[];
  return Partitioners.DefaultPartitioner()({ topic: 'spans', partitionMetadata, message: { key, value: null } });
}
