import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * Structured JSON logs on stderr, so stdout stays free for a command's own output (query results, truth).
 * The level comes from HOLDSCOPE_LOG_LEVEL (default `info`; the test runner sets `warn`).
 */
export function createLogger(name: string, level = process.env.HOLDSCOPE_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { service: 'holdscope' } }, pino.destination(2));
}
