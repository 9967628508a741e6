import { Partitioners, type Message, type PartitionMetadata } from 'kafkajs';
import { MESSAGE_HEADERS } from '../contract/index.ts';

// Keyed messages only: this partitioner's round-robin state is never used, and its choice for a key is kafkajs's own.
const partitionOfKey = Partitioners.DefaultPartitioner();

/** What the partitioner reads of a topic's metadata for a keyed message: the number of partitions. */
const metadataOf = (partitions: number): PartitionMetadata[] =>
  Array.from({ length: partitions }, (_, partitionId) => ({
    partitionErrorCode: 0,
    partitionId,
    leader: 0,
    replicas: [0],
    isr: [0],
    offlineReplicas: [],
  }));

/**
 * One send's span messages merged into one message per partition. kafkajs spends most of a produce per record, not
 * per byte (encoders and buffers for each record and each of its headers): a message per lifecycle, about 3.7 spans
 * at the bench's traffic, made the producer a third of the collector's main thread (docs/collector.md). Each message
 * goes to the partition Kafka's default partitioner gives its key, as it would unmerged, so a lifecycle's spans stay
 * in one partition, in order. The values are OTLP ExportTraceServiceRequests in protobuf, whose one field repeats:
 * their concatenation is the request holding all their resource spans. A merged message keeps the key when all its
 * spans share it, and has none otherwise.
 */
export function mergeByPartition(topic: string, messages: readonly Message[], partitions: number): Message[] {
  const partitionMetadata = metadataOf(partitions);
  const byPartition = new Map<number, Message[]>();
  for (const message of messages) {
    const partition = partitionOfKey({ topic, partitionMetadata, message });
    const list = byPartition.get(partition);
    if (list) list.push(message);
    else byPartition.set(partition, [message]);
  }
  const merged: Message[] = [];
  for (const [partition, list] of byPartition) {
    const first = list[0] as Message;
    const key = list.every((m) => m.key === first.key) ? first.key : null;
    const value = list.length === 1 ? first.value : Buffer.concat(list.map((m) => m.value as Buffer));
    merged.push({ partition, key, value, headers: MESSAGE_HEADERS });
  }
  return merged;
}
