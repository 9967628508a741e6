import { createKafka, type Logger } from '../common/index.ts';
import type { CollectorConfig } from './config.ts';

/**
 * Creates the span and dead-letter topics with the configured partitions and retention. Brokers that do not
 * allow it (ACLs, auto-creation only, test brokers) are tolerated: the collector then uses what exists.
 */
export async function ensureTopics(config: CollectorConfig, log: Logger): Promise<void> {
  const admin = createKafka({ brokers: config.kafkaBrokers, clientId: `${config.kafkaClientId}-admin`, log }).admin();
  try {
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const wanted = [config.topic, config.deadLetterTopic].filter((t) => !existing.has(t));
    if (wanted.length === 0) return;
    await admin.createTopics({
      waitForLeaders: true,
      topics: wanted.map((topic) => ({
        topic,
        numPartitions: config.topicPartitions,
        replicationFactor: config.topicReplicationFactor,
        configEntries: [{ name: 'retention.ms', value: String(config.topicRetentionMs) }],
      })),
    });
    log.info({ topics: wanted, partitions: config.topicPartitions }, 'created topics');
  } catch (error) {
    log.warn(
      { err: (error as Error).message },
      'could not create topics; continuing with what the broker has (auto-creation or existing topics)',
    );
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}
