/**
 * The Kafka message key of a lifecycle's spans: `cluster/request id`. All generations of one id share a
 * partition, so a stale ack and the generation it lands on are ordered together.
 */
/**
 * The one text form of a lifecycle key, for maps and sets: NUL cannot occur in a cluster name or request id that
 * reached storage as TSV, so the form is unambiguous.
 */
export function lifecycleKeyId(cluster: string, requestId: string, generation: number): string {
  return `${cluster}\u0000${requestId}\u0000${generation}`;
}

export function partitionKey(cluster: string, requestId: string): string {
  return `${cluster}/${requestId}`;
}
