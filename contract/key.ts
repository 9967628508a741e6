import type { LifecycleKey } from './events.ts';

/**
 * The Kafka message key of a lifecycle's spans: `cluster/request id`. All generations of one id share a
 * partition, so a stale ack and the generation it lands on are ordered together.
 */
export function partitionKey(cluster: string, requestId: string): string {
  return `${cluster}/${requestId}`;
}

/** A printable, unambiguous form of a lifecycle key (JSON escapes any separator inside the id). */
export function formatLifecycleKey(key: LifecycleKey): string {
  return JSON.stringify([key.cluster, key.requestId, key.generation]);
}
