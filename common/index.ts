export * from './errors.ts';
export { createLogger, type Logger } from './logger.ts';
export { createKafka } from './kafka.ts';
export { createClickHouse, classifyClickHouseError, isServerError, CLICKHOUSE_SETTINGS, type ClickHouseClient, type ClickHouseConnection } from './clickhouse.ts';
