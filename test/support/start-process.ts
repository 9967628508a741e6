import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface StartedHoldscope {
  child: ChildProcess;
  otlpPort: number;
  httpPort: number;
  startedInMs: number;
  /** Its log (stderr) so far, the last 200,000 characters. */
  log(): string;
  /** How it ended. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs `holdscope start` as a user would, on its own data folder and free ports, and waits for a healthy /healthz. */
export async function startHoldscope(args: string[], env: Record<string, string> = {}): Promise<StartedHoldscope> {
  const began = Date.now();
  const dataDir = mkdtempSync(join(tmpdir(), 'holdscope-start-'));
  const child = spawn(process.execPath, ['bin/holdscope.js', 'start', '--http-port', '0', '--otlp-port', '0', '--data', dataDir, ...args], {
    env: { ...process.env, HOLDSCOPE_LOG_LEVEL: 'info', KAFKA_BROKERS: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stdout?.resume();
  // Its data folder goes with it: nothing reads it once it has exited.
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      rmSync(dataDir, { recursive: true, force: true });
      resolve({ code, signal });
    }),
  );
  const ports = await new Promise<{ otlpPort: number; httpPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ports logged within 60 s:\n${stderr.slice(-3000)}`)), 60_000);
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-200_000);
      const line = stderr.split('\n').find((l) => l.includes('"msg":"ports"'));
      if (line) {
        clearTimeout(timer);
        resolve(JSON.parse(line) as { otlpPort: number; httpPort: number });
      }
    });
    void exited.then(({ code }) => reject(new Error(`holdscope start exited with ${code}:\n${stderr.slice(-3000)}`)));
  });
  const health = await fetch(`http://127.0.0.1:${ports.httpPort}/healthz`);
  assert.equal(health.status, 200);
  return { child, ...ports, startedInMs: Date.now() - began, log: () => stderr, exited };
}

/** Stops it as Ctrl-C does; its exit status. After `killAfterMs` (when given) it is killed, and the status is null. */
export async function stopHoldscope(child: ChildProcess, killAfterMs?: number): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.kill('SIGINT');
  if (killAfterMs === undefined) return exited;
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<null>((resolve) => {
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve(null);
    }, killAfterMs);
  });
  try {
    return await Promise.race([exited, killed]);
  } finally {
    clearTimeout(timer);
  }
}
