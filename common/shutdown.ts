import type { Logger } from './logger.ts';

/**
 * Runs `stop`, giving up after `ms`: then says what it was still waiting for (the entries `stop` keeps in the set it is
 * given, see Pipeline.shutdown). A stop that fails within the deadline rejects. Every long-running command stops this
 * way, so that SIGTERM ends the process within its deadline whatever a dependency is doing (a ClickHouse that does not
 * answer, a Kafka group join); the caller then exits with status 1.
 */
export async function stopWithin(
  ms: number,
  stop: (waitingFor: Set<() => string>) => Promise<void>,
): Promise<{ stopped: true } | { stopped: false; waitingFor: string[] }> {
  const waitingFor = new Set<() => string>();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), ms);
  });
  try {
    const first = await Promise.race([stop(waitingFor).then(() => 'stopped' as const), deadline]);
    if (first === 'stopped') return { stopped: true };
    return { stopped: false, waitingFor: [...waitingFor].map((describe) => describe()) };
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves at the first SIGINT or SIGTERM. */
export function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
}

/**
 * How every long-running command stops: `stop` within `ms`, or a log line naming what it still waited for and exit
 * status 1. Leaving early loses nothing anywhere in holdscope: a sender is told 200 only for spans Kafka or ClickHouse
 * has, and Kafka offsets are committed only after ClickHouse has the rows, so what was in hand is sent or read again.
 */
export async function stopOrExit(log: Logger, ms: number, stop: (waitingFor: Set<() => string>) => Promise<void>): Promise<void> {
  log.info({ shutdownTimeoutMs: ms }, 'shutting down');
  const outcome = await stopWithin(ms, stop);
  if (outcome.stopped) return;
  log.error(
    { shutdownTimeoutMs: ms, waitingFor: outcome.waitingFor },
    `shutdown did not finish within ${ms} ms; exiting anyway, still waiting for: ${outcome.waitingFor.join('; ') || 'nothing known'}`,
  );
  process.exit(1);
}
