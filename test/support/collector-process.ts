/**
 * `holdscope collector` as a child process (`node bin/holdscope.js collector ...`), for fault tests that flood
 * or fuzz it and must see whether the process itself survives, and how much memory it takes.
 *
 * The child listens on a port of its own choosing (`--port 0`): the port is read from its "collector listening"
 * log line, so no free-port race. It logs at info (pino JSON lines on stderr, of which the last 32 KiB are kept
 * for failure messages). Should this test process die outright, the child exits at the EOF of its stdin.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STDERR_KEEP_CHARS = 32_768;
const READY_TIMEOUT_MS = 60_000;
const TERM_GRACE_MS = 10_000;

// Exits the child when its stdin closes, i.e. when this process is gone (even after SIGKILL).
const EXIT_WITH_STDIN = `data:text/javascript,${encodeURIComponent(
  'process.stdin.on("end", () => process.exit(70)).on("error", () => process.exit(70)).resume().unref();',
)}`;

const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;
function track(child: ChildProcess): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const c of liveChildren) c.kill('SIGKILL');
    });
  }
  liveChildren.add(child);
}

/** Memory figures of a process from /proc/PID/status, in kB (undefined once it is gone). */
export function procMemoryKb(pid: number): { rss: number; hwm: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

export interface RssSampler {
  /** Highest VmRSS seen so far (kB). */
  peakKb(): number;
  samples(): number;
  stop(): void;
}

/** Samples VmRSS of `pid` every `intervalMs` on an unref'd timer; the peak is the highest sample. */
export function sampleRss(pid: number, intervalMs = 100): RssSampler {
  let peak = 0;
  let count = 0;
  const take = () => {
    const m = procMemoryKb(pid);
    if (m && Number.isFinite(m.rss)) {
      peak = Math.max(peak, m.rss);
      count++;
    }
  };
  take();
  const timer = setInterval(take, intervalMs);
  timer.unref();
  return {
    peakKb: () => peak,
    samples: () => count,
    stop: () => {
      take();
      clearInterval(timer);
    },
  };
}

export interface CollectorProcess {
  readonly pid: number;
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  alive(): boolean;
  /** How it ended (`exit code 0`, `signal SIGKILL`), undefined while it runs. */
  exit(): string | undefined;
  /** The last 32 KiB of its stderr. */
  stderr(): string;
  /** pid, state and stderr tail: for assertion messages. */
  describe(): string;
  /** Counter and gauge values from its /metrics, by name with labels (`name{label="x"}`). */
  metrics(): Promise<Map<string, number>>;
  /** SIGTERM (drain to Kafka), SIGKILL after 10 s; resolves with how it ended. Idempotent. */
  stop(): Promise<string>;
}

/**
 * Spawns `node bin/holdscope.js collector --host 127.0.0.1 --port 0 ARGS` and resolves once it listens and
 * answers /healthz (rejects with its stderr when it exits first or takes more than 60 s).
 */
export async function spawnCollector(args: string[], env: Record<string, string> = {}): Promise<CollectorProcess> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, HOLDSCOPE_LOG_LEVEL: 'info', ...env };
  delete childEnv.NODE_TEST_CONTEXT; // the child is no test file
  const child = spawn(
    process.execPath,
    ['--import', EXIT_WITH_STDIN, 'bin/holdscope.js', 'collector', '--host', '127.0.0.1', '--port', '0', ...args],
    {
      cwd: PROJECT_ROOT,
      env: childEnv,
      stdio: ['pipe', 'ignore', 'pipe'],
    },
  );
  track(child);
  child.stdin?.on('error', () => {}); // EPIPE after the child died: reported through 'exit' instead
  let stderr = '';
  let exitText: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      liveChildren.delete(child);
      exitText = signal ? `signal ${signal}` : `exit code ${code}`;
      resolve();
    });
  });
  let onListening: ((port: number) => void) | undefined;
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP_CHARS);
  });
  if (child.stderr) {
    createInterface({ input: child.stderr }).on('line', (line) => {
      if (!onListening || !line.includes('collector listening')) return;
      const port = /"url":"http:\/\/[^:"]+:(\d+)\//.exec(line)?.[1];
      if (port) onListening(Number(port));
    });
  }
  const describe = () =>
    `collector pid ${child.pid} (${exitText ? `ended by ${exitText}` : 'running'}); stderr tail:\n${stderr.trim().slice(-8000) || '(empty)'}`;

  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`collector not listening within ${READY_TIMEOUT_MS} ms: ${describe()}`));
    }, READY_TIMEOUT_MS);
    onListening = (p) => {
      clearTimeout(timer);
      onListening = undefined;
      resolve(p);
    };
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`collector exited before listening: ${describe()}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const ok = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) }).then(
      (res) => res.status === 200,
      () => false,
    );
    if (ok) break;
    if (exitText !== undefined || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`collector /healthz never answered 200: ${describe()}`);
    }
    await sleep(100);
  }

  let stopped: Promise<string> | undefined;
  return {
    pid: child.pid ?? -1,
    url,
    alive: () => exitText === undefined,
    exit: () => exitText,
    stderr: () => stderr,
    describe,
    metrics: async () => {
      const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) });
      const values = new Map<string, number>();
      for (const line of (await res.text()).split('\n')) {
        const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)/.exec(line);
        if (match) values.set(match[1] as string, Number(match[2]));
      }
      return values;
    },
    stop: () => {
      stopped ??= (async () => {
        if (exitText === undefined) {
          child.kill('SIGTERM');
          const ended = await Promise.race([exited.then(() => true), sleep(TERM_GRACE_MS, false, { ref: false })]);
          if (!ended) child.kill('SIGKILL');
          await exited;
        }
        return exitText as string;
      })();
      return stopped;
    },
  };
}
