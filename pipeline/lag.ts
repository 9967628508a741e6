import type { Kafka } from 'kafkajs';
import type { Logger } from '../common/index.ts';
import type { PipelineMetrics } from './metrics.ts';

/**
 * Samples the consumer group's lag (high watermark minus committed offset, summed over partitions) into
 * `holdscope_pipeline_consumer_lag_messages{topic}`. A failed sample keeps the last value and logs.
 */
export function startLagMonitor(options: {
  kafka: Kafka;
  groupId: string;
  topics: string[];
  metrics: PipelineMetrics;
  log: Logger;
  intervalMs?: number;
}): { sample(): Promise<void>; stop(): Promise<void> } {
  const admin = options.kafka.admin();
  let connected = false;
  let running = true;
  const sample = async () => {
    if (!connected) {
      await admin.connect();
      connected = true;
    }
    const committed = await admin.fetchOffsets({ groupId: options.groupId, topics: options.topics });
    for (const { topic, partitions } of committed) {
      const ends = await admin.fetchTopicOffsets(topic);
      let lag = 0n;
      for (const end of ends) {
        const done = partitions.find((p) => p.partition === end.partition)?.offset ?? '-1';
        const from = BigInt(done) >= 0n ? BigInt(done) : BigInt(end.low);
        if (BigInt(end.high) > from) lag += BigInt(end.high) - from;
      }
      options.metrics.consumerLag.set({ topic }, Number(lag));
    }
  };
  const timer = setInterval(() => {
    if (running) sample().catch((error: Error) => options.log.warn({ err: error.message }, 'could not sample consumer lag'));
  }, options.intervalMs ?? 15_000);
  timer.unref();
  return {
    sample,
    async stop() {
      running = false;
      clearInterval(timer);
      if (connected) await admin.disconnect().catch(() => undefined);
    },
  };
}
