export * from './errors.ts';
export { createLogger, type Logger } from './logger.ts';
