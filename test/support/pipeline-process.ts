/**
 * `holdscope pipeline` as a separate OS process (`node bin/holdscope.js pipeline ...`), for tests that must
 * SIGKILL it mid-stream, stop it cleanly, or run several members of one consumer group: what an in-process
 * Pipeline cannot show (a crash leaves no chance to flush or commit).
 *
 * Each process logs at warn to a captured stderr (the last 32 KiB) that failure messages quote, and serves its
 * Prometheus metrics on a port of its own, which `metrics()` scrapes.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { KAFKA_TEST_HEARTBEAT_INTERVAL_MS, KAFKA_TEST_SESSION_TIMEOUT_MS } from './kafka-mock.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STDERR_KEEP_CHARS = 32_768;
const READY_TIMEOUT_MS = 60_000;

export interface PipelineProcess {
  readonly name: string;
  readonly pid: number;
  readonly metricsPort: number;
  alive(): boolean;
  /** The last 32 KiB of its stderr (pino JSON lines at warn and above). */
  stderr(): string;
  /** Counter and gauge values from its /metrics, labels summed. */
  metrics(): Promise<Record<string, number>>;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, and how the process ended if it did within `ms` (`exit code 0`, `signal SIGKILL`, ...). */
  terminate(ms: number): Promise<string | undefined>;
  /** SIGTERM (a clean shutdown), SIGKILL after 10 s, and wait for the exit. Idempotent. */
  stop(): Promise<void>;
}

// Pipelines still running, killed when this process exits so a forgotten stop() leaves no orphan; and should this
// process be killed outright, each pipeline exits at the EOF of its stdin (the guard below), as the Kafka mock
// and the ClickHouse server do.
const liveChildren = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of liveChildren) child.kill('SIGKILL');
});
const EXIT_WITH_STDIN = `data:text/javascript,${encodeURIComponent(
  'process.stdin.on("end", () => process.exit(70)).on("error", () => process.exit(70)).resume().unref();',
)}`;

/**
 * SIGKILLs every pipeline this process spawned and has not seen exit: for an `after` hook, so a test that failed
 * halfway leaves nothing consuming from the next test's Kafka mock.
 */
export function killLivePipelines(): void {
  for (const child of liveChildren) child.kill('SIGKILL');
}

/**
 * A TCP port free right now (the pipeline's --metrics-port takes no 0), below Linux's ephemeral range (32768+):
 * a port the kernel hands out there may be taken, between this check and the pipeline's listen, by any outgoing
 * connection of the tests running beside it. Probed on every interface, as the pipeline listens.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port found in 20000-31999');
}

/** Prometheus text from `http://127.0.0.1:PORT/metrics` as name → value, the series of one name summed over labels. */
export async function scrape(port: number): Promise<Record<string, number>> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200);
  const values: Record<string, number> = {};
  for (const line of (await res.text()).split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (match) values[match[1] as string] = (values[match[1] as string] ?? 0) + Number(match[2]);
  }
  return values;
}

/**
 * Spawns `node bin/holdscope.js pipeline ARGS` and resolves once its /healthz answers, which `holdscope pipeline`
 * serves only once ClickHouse was reached (the schema migrated) and the consumer started. The consumer's session
 * timeout and heartbeat are the ones under which the Kafka mock completes group joins quickly.
 */
export async function spawnPipeline(name: string, args: string[], env: Record<string, string> = {}): Promise<PipelineProcess> {
  const metricsPort = await freePort();
  const childEnv: NodeJS.ProcessEnv = { ...process.env, HOLDSCOPE_LOG_LEVEL: 'warn', ...env };
  delete childEnv.NODE_TEST_CONTEXT; // the child is no test file
  const child = spawn(
    process.execPath,
    [
      '--import',
      EXIT_WITH_STDIN,
      'bin/holdscope.js',
      'pipeline',
      ...args,
      '--metrics-port',
      String(metricsPort),
      '--session-timeout-ms',
      String(KAFKA_TEST_SESSION_TIMEOUT_MS),
      '--heartbeat-interval-ms',
      String(KAFKA_TEST_HEARTBEAT_INTERVAL_MS),
    ],
    { cwd: PROJECT_ROOT, env: childEnv, stdio: ['pipe', 'ignore', 'pipe'] },
  );
  liveChildren.add(child);
  child.stdin?.on('error', () => {}); // EPIPE after the child died: reported through 'exit' instead
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP_CHARS);
  });
  let exitText: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      liveChildren.delete(child);
      exitText = signal ? `signal ${signal}` : `exit code ${code}`;
      resolve();
    });
  });
  const explain = (): string =>
    `pipeline ${name} (pid ${child.pid}${exitText ? `, ended by ${exitText}` : ''}); stderr:\n${stderr.trim() || '(empty)'}`;
  // An unref'd timer: a process that ended at once must not hold this one for the rest of the wait.
  const waitExit = (ms: number): Promise<boolean> =>
    Promise.race([exited.then(() => true), sleep(ms, undefined, { ref: false }).then(() => false)]);

  const proc: PipelineProcess = {
    name,
    pid: child.pid ?? -1,
    metricsPort,
    alive: () => exitText === undefined,
    stderr: () => stderr,
    metrics: async () => {
      try {
        return await scrape(metricsPort);
      } catch (error) {
        throw new Error(`scraping ${explain()}`, { cause: error });
      }
    },
    kill: async () => {
      if (exitText === undefined) child.kill('SIGKILL');
      await exited;
    },
    terminate: async (ms) => {
      if (exitText === undefined) child.kill('SIGTERM');
      await waitExit(ms);
      return exitText;
    },
    stop: async () => {
      if (exitText !== undefined) return;
      child.kill('SIGTERM');
      if (!(await waitExit(10_000))) child.kill('SIGKILL');
      await exited;
    },
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (exitText !== undefined) throw new Error(`${explain()}\nexited before it was ready`);
    if (Date.now() > deadline) {
      await proc.kill();
      throw new Error(`${explain()}\nnot ready within ${READY_TIMEOUT_MS / 1000} s`);
    }
    const ok = await fetch(`http://127.0.0.1:${metricsPort}/healthz`, { signal: AbortSignal.timeout(1000) }).then(
      (res) => res.status === 200,
      () => false,
    );
    if (ok) return proc;
    await sleep(200);
  }
}

/** For failure messages: which process, whether it still runs, and its stderr. */
export const describeProcess = (p: PipelineProcess): string =>
  `pipeline ${p.name} (pid ${p.pid}, ${p.alive() ? 'running' : 'ended'}); stderr:\n${p.stderr().trim() || '(empty)'}`;
