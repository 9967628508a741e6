import { HoldscopeError } from './errors.ts';

/** How a failed call is retried: exponential backoff from `initialMs`, capped at `maxMs`, with jitter. */
export interface RetryPolicy {
  initialMs: number;
  maxMs: number;
}

/** 250 ms doubling to 5 s: a restarting ClickHouse or a broker election is seen within seconds, without a storm of calls. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { initialMs: 250, maxMs: 5000 };

/**
 * The pause before retry number `attempt` (1 for the first retry): the capped exponential delay, of which a random
 * half is kept ("equal jitter"). Without jitter every pipeline and collector that lost ClickHouse at the same instant
 * retries at the same instants, and the server comes back to a synchronized burst.
 */
export function retryDelayMs(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.max(0, Math.min(attempt - 1, 30)));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** Resolves after `ms`, or at once when `signal` aborts (the caller then looks at the signal). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

export interface RetryOptions {
  policy?: RetryPolicy;
  /** Stops the retries: the last error is thrown at the next failure or during the pause. */
  signal?: AbortSignal;
  /** Turns whatever `attempt` threw into a HoldscopeError; retries only those that are `retriable`. */
  classify: (error: unknown) => HoldscopeError;
  /** Told of each failure that will be retried, with the pause before the next try (logs, metrics, heartbeats). */
  onRetry?: (error: HoldscopeError, pauseMs: number, tries: number) => void | Promise<void>;
}

/**
 * Runs `attempt` until it succeeds, pausing with backoff and jitter between retriable failures. A permanent error (or
 * any error once `signal` has aborted) is thrown at once, classified: retrying the same call would fail the same way.
 */
export async function retry<T>(attempt: () => Promise<T>, options: RetryOptions): Promise<T> {
  const policy = options.policy ?? DEFAULT_RETRY_POLICY;
  for (let tries = 1; ; tries++) {
    try {
      return await attempt();
    } catch (error) {
      const failure = options.classify(error);
      if (!failure.retriable || options.signal?.aborted) throw failure;
      const pause = retryDelayMs(policy, tries);
      await options.onRetry?.(failure, pause, tries);
      await sleep(pause, options.signal);
      if (options.signal?.aborted) throw failure;
    }
  }
}
