/**
 * The one error hierarchy of holdscope. `retriable` tells a caller whether the same call may succeed
 * later (a broker or ClickHouse outage) or never will (bad input, bad config).
 */
export class HoldscopeError extends Error {
  readonly retriable: boolean;
  readonly code: string;

  constructor(code: string, message: string, options: { retriable?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retriable = options.retriable ?? false;
  }
}

/** Invalid configuration: names the key, the expected value and the value given. */
export class ConfigError extends HoldscopeError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('CONFIG_INVALID', message, { retriable: false, ...options });
  }
}

/** Input that can never be accepted as it is (malformed OTLP, a span that breaks the contract). */
export class InputError extends HoldscopeError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('INPUT_INVALID', message, { retriable: false, ...options });
  }
}

/** A dependency (Kafka, ClickHouse, an OTLP endpoint) is unavailable or overloaded for now. */
export class UnavailableError extends HoldscopeError {
  readonly retryAfterMs: number;

  constructor(message: string, options: { retryAfterMs?: number; cause?: unknown; code?: string } = {}) {
    super(options.code ?? 'UNAVAILABLE', message, { retriable: true, cause: options.cause });
    this.retryAfterMs = options.retryAfterMs ?? 1000;
  }
}

/** A bounded buffer is full: the caller should back off and retry (HTTP 429), nothing is broken. */
export class OverloadedError extends UnavailableError {
  constructor(message: string, options: { retryAfterMs?: number; cause?: unknown } = {}) {
    super(message, { ...options, code: 'OVERLOADED' });
  }
}

/**
 * The outcome of an operation that may be retried, said in its type rather than through exceptions: `retryable` may
 * succeed after `afterMs`, which is always its error's `retryAfterMs`. (No publish can fail for good: a span the
 * contract refuses is rejected before it is queued, and Kafka's and ClickHouse's refusals are outages to wait out.)
 */
export type RetryableResult<T = void> = { kind: 'success'; value: T } | { kind: 'retryable'; afterMs: number; error: UnavailableError };

export const success = <T>(value: T): RetryableResult<T> => ({ kind: 'success', value });
export const retryable = <T>(error: UnavailableError): RetryableResult<T> => ({ kind: 'retryable', afterMs: error.retryAfterMs, error });
