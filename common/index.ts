export * from './errors.ts';
export { createLogger, type Logger } from './logger.ts';
export { createKafka } from './kafka.ts';
export {
  createClickHouse,
  insertsBinaryBodies,
  classifyClickHouseError,
  clickHouseFailureKind,
  isServerError,
  serverErrorOf,
  type ClickHouseClient,
  type ClickHouseConnection,
  type ClickHouseFailureKind,
} from './clickhouse.ts';
export { stopOrExit, stopWithin, waitForSignal } from './shutdown.ts';
export { DEFAULT_RETRY_POLICY, retry, type RetryOptions, type RetryPolicy } from './retry.ts';
export {
  createHttpApp,
  httpStatusOf,
  listen,
  retryAfterSeconds,
  type ErrorWriter,
  type HttpFoundationOptions,
  type Listening,
  type Readiness,
} from './http.ts';
export { checkedIdentifier, loadConfig, key, type KeyInfo } from './config.ts';
export { Rng } from './rng.ts';
