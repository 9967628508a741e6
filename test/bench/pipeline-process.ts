import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { KAFKA_TEST_HEARTBEAT_INTERVAL_MS, KAFKA_TEST_SESSION_TIMEOUT_MS } from '../support/kafka-mock.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** `VmHWM` (peak resident set) or `VmRSS` of a process, in MiB. */
export function memoryMiB(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : NaN;
}

export interface BenchPipeline {
  pid: number;
  metrics(): Promise<Record<string, number>>;
  stop(): Promise<void>;
}

/**
 * The V8 heap limit docs/operations.md recommends for a pipeline process. Without one, V8 sizes its heap from the
 * machine's memory and lets garbage pile up to several hundred MiB before collecting it.
 */
export const PIPELINE_HEAP_MB = 192;

/** `holdscope pipeline` as its own process, as production runs it (heap limit included), so its memory is its own. */
export async function spawnPipeline(args: string[]): Promise<BenchPipeline> {
  const port = await freePort();
  const nodeOptions = [process.env.NODE_OPTIONS, `--max-old-space-size=${PIPELINE_HEAP_MB}`].filter(Boolean).join(' ');
  const env: NodeJS.ProcessEnv = { ...process.env, HOLDSCOPE_LOG_LEVEL: 'warn', NODE_OPTIONS: nodeOptions };
  const child = spawn(
    process.execPath,
    ['bin/holdscope.js', 'pipeline', ...args, '--metrics-port', String(port), '--session-timeout-ms', String(KAFKA_TEST_SESSION_TIMEOUT_MS), '--heartbeat-interval-ms', String(KAFKA_TEST_HEARTBEAT_INTERVAL_MS)],
    { cwd: PROJECT_ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-8192)));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => ((exited = true), resolve())));
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  const metrics = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) }).catch((error: Error) => {
      throw new Error(`holdscope pipeline (pid ${child.pid}${exited ? ', exited' : ''}) did not answer /metrics: ${error.message}; stderr: ${stderr}`);
    });
    const values: Record<string, number> = {};
    for (const line of (await res.text()).split('\n')) {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
      if (match) values[match[1] as string] = (values[match[1] as string] ?? 0) + Number(match[2]);
    }
    return values;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) throw new Error(`holdscope pipeline exited before it was ready: ${stderr}`);
    if (Date.now() > deadline) throw new Error(`holdscope pipeline not ready within 60 s: ${stderr}`);
    if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) break;
    await sleep(100);
  }
  return {
    pid: child.pid ?? -1,
    metrics,
    async stop() {
      if (!exited) child.kill('SIGTERM');
      await Promise.race([exit, sleep(15_000).then(kill)]);
      process.off('exit', kill);
    },
  };
}

/**
 * Drains `expectedRows` rows through a pipeline process: throughput from its first consumed message to the last
 * row acknowledged (sampled every 50 ms), and its peak RSS over the whole run.
 */
export async function drainThroughPipeline(args: string[], expectedRows: number, onProgress?: (rows: number) => void) {
  const pipeline = await spawnPipeline(args);
  try {
    let first = 0;
    let rows = 0;
    let peakSampled = 0;
    const deadline = Date.now() + 30 * 60_000;
    while (rows < expectedRows) {
      if (Date.now() > deadline) throw new Error(`the pipeline stored ${rows} of ${expectedRows} rows in 30 minutes`);
      await sleep(50);
      const m = await pipeline.metrics();
      if (!first && (m.holdscope_pipeline_messages_total ?? 0) > 0) first = performance.now();
      rows = m.holdscope_pipeline_rows_inserted_total ?? 0;
      peakSampled = Math.max(peakSampled, memoryMiB(pipeline.pid, 'VmRSS'));
      onProgress?.(rows);
    }
    const seconds = (performance.now() - first) / 1000;
    const peakRssMiB = Math.max(peakSampled, memoryMiB(pipeline.pid, 'VmHWM'));
    return { rows, seconds, spansPerSecond: rows / seconds, peakRssMiB };
  } finally {
    await pipeline.stop();
  }
}
