import type { Response } from 'express';
import { httpStatusOf, retryAfterSeconds, type Logger } from '../common/index.ts';

/**
 * Answers a failed request the way the HTTP foundation's error handler does (common/http.ts): 400 with the reason
 * for bad input, 429/503 with Retry-After from the error, 500 otherwise. Internal details go to the log, never to
 * the page.
 */
export function sendError(res: Response, log: Logger, error: unknown, what: string): void {
  const { status, message, retryAfterMs } = httpStatusOf(error);
  if (status >= 500) log.error({ err: error instanceof Error ? error.message : String(error) }, `${what} failed`);
  if (retryAfterMs !== undefined) res.setHeader('Retry-After', retryAfterSeconds(retryAfterMs));
  res.status(status).json({ error: message });
}
