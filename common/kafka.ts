import { Kafka, logLevel, type LogEntry } from 'kafkajs';
import type { Logger } from './logger.ts';

const LEVELS: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/** A kafkajs client whose logs go through pino, at warn and above unless the logger says otherwise. */
export function createKafka(options: {
  brokers: string[];
  clientId: string;
  log: Logger;
  connectionTimeoutMs?: number;
  requestTimeoutMs?: number;
}): Kafka {
  const log = options.log.child({ component: 'kafkajs' });
  return new Kafka({
    clientId: options.clientId,
    brokers: options.brokers,
    connectionTimeout: options.connectionTimeoutMs ?? 3000,
    requestTimeout: options.requestTimeoutMs ?? 10_000,
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log: entry }: LogEntry) => {
        const { message, ...rest } = entry;
        log[LEVELS[level] ?? 'info'](rest, message);
      },
  });
}
