import type { Response } from 'express';
import { HoldscopeError, InputError, type Logger } from '../common/index.ts';

/**
 * Answers a failed request: 400 with the reason for bad input, 503 with Retry-After while ClickHouse is
 * unavailable, 500 otherwise. Internal details go to the log, never to the page.
 */
export function sendError(res: Response, log: Logger, error: unknown, what: string): void {
  if (error instanceof InputError) {
    res.status(400).json({ error: error.message });
    return;
  }
  const retriable = error instanceof HoldscopeError && error.retriable;
  log.error({ err: error instanceof Error ? error.message : String(error) }, `${what} failed`);
  if (retriable) res.setHeader('Retry-After', '5');
  res.status(retriable ? 503 : 500).json({ error: retriable ? 'ClickHouse unavailable' : 'internal error' });
}
