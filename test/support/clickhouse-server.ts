/**
 * A real ClickHouse HTTP server (ClickHouse 26.x from chdb's libchdb.so) as a child process that tests start,
 * kill and restart: the way to test ClickHouse outages over the ordinary HTTP protocol with @clickhouse/client.
 *
 * The server is scripts/chdb-server.mjs (see its header). Facts worth knowing when writing tests against it:
 * - one process per data directory: a second server on the same path fails at once with
 *   "data directory ... is locked by another ClickHouse process ... Code: 76";
 * - data of finished INSERTs survives kill() (SIGKILL) and restart(); Memory tables do not;
 * - `system.processes` always shows one extra query, id `chdb-server-keepalive`: the endless query that keeps
 *   the server alive (never KILL it: the server would stop serving);
 * - the first request after restart() works (no stale keep-alive socket), a request while it is down rejects
 *   with ECONNREFUSED;
 * - a SELECT whose client went away runs on to its end unless it ran with both
 *   cancel_http_readonly_queries_on_client_close=1 and send_progress_in_http_headers=1;
 * - about 0.4-0.6 s from spawn to ready (about 1 s with two starting at once on 2 cores), about 250 MB RSS.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import { CLICKHOUSE_SETTINGS } from '../../common/clickhouse.ts';
import { detachWithStderrTail } from './detached.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SCRIPT = join(PROJECT_ROOT, 'scripts', 'chdb-server.mjs');

const READY_TIMEOUT_MS = 30_000;
const TERM_GRACE_MS = 5_000;

export interface ClickHouseServerOptions {
  /** Data directory (created if missing). Default: a fresh temporary directory, removed when the process exits. */
  path?: string;
  /** HTTP port on 127.0.0.1. Default 0: ClickHouse picks a free one, which restart() then keeps. */
  port?: number;
  /**
   * Also serve the native protocol on this fixed port (what Distributed tables use between the nodes of a
   * cluster; fixed because the other nodes' remote_servers name it). Default: HTTP only.
   */
  tcpPort?: number;
  /** A ClickHouse config file (macros, remote_servers, max_server_memory_usage, ...). Default: none. */
  configFile?: string;
}

/** What a server is started with besides its path and HTTP port (kept for restart()). */
type ServerExtras = Pick<ClickHouseServerOptions, 'tcpPort' | 'configFile'>;

export interface ClickHouseServer {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly port: number;
  /** Data directory. */
  readonly path: string;
  /** Pid of the current server process (changes on restart; -1 after stop() or kill()). */
  readonly pid: number;
  /** How the last server process ended (`undefined` while it runs); `{ code: 0 }` after a clean stop(). */
  readonly lastExit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** SIGTERM, wait for the exit; SIGKILL after 5 s. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL (a crash, an outage), wait for the exit. Idempotent. */
  kill(): Promise<void>;
  /** Start again on the same path and port (stopping the running server first, if any) and wait until ready. */
  restart(): Promise<void>;
}

// Server processes still running, killed when this process exits so a forgotten stop() leaves no orphan.
// (The server also exits on stdin EOF, which covers this process being killed outright.)
const live = new Set<ChildProcessWithoutNullStreams>();
const ownedDirs = new Set<string>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL');
    for (const dir of ownedDirs) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch {
        // a dying server may still be writing into it: leave it to the OS's temp cleaning
      }
    }
  });
}

interface Running {
  child: ChildProcessWithoutNullStreams;
  port: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Spawns scripts/chdb-server.mjs and resolves once it printed `ready <port>`; rejects with its stderr. */
async function spawnServer(
  path: string,
  port: number,
  onExit: (exit: { code: number | null; signal: NodeJS.Signals | null }) => void,
  extras: ServerExtras = {},
): Promise<Running> {
  installExitHook();
  const extraArgs = [
    ...(extras.tcpPort === undefined ? [] : ['--tcp-port', String(extras.tcpPort)]),
    ...(extras.configFile === undefined ? [] : ['--config-file', extras.configFile]),
  ];
  const child = spawn(process.execPath, [SCRIPT, '--path', path, '--port', String(port), ...extraArgs, '--exit-with-stdin'], {
    cwd: PROJECT_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  live.add(child);
  const describeStderr = detachWithStderrTail(child);

  let exitText: string | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      exitText = signal ? `signal ${signal}` : `exit code ${code}`;
      onExit({ code, signal });
      resolve({ code, signal });
    });
    child.once('error', (err) => {
      live.delete(child);
      exitText = `spawn error: ${err.message}`;
      onExit({ code: null, signal: null });
      resolve({ code: null, signal: null });
    });
  });

  const readyPort = await new Promise<number>((resolve, reject) => {
    let settled = false;
    const fail = (message: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      // Give the stderr pipe a moment to deliver the last lines before reporting them.
      void Promise.race([exited, new Promise((r) => setTimeout(r, 200))]).then(() =>
        reject(new Error(`clickhouse-server: ${message}${describeStderr()}`)),
      );
    };
    const timer = setTimeout(() => fail(`not ready within ${READY_TIMEOUT_MS} ms (path ${path}, port ${port})`), READY_TIMEOUT_MS);
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (settled) return;
      const match = /^ready (\d+)$/.exec(line);
      if (!match) return fail(`unexpected line on stdout ${JSON.stringify(line)}`);
      settled = true;
      clearTimeout(timer);
      resolve(Number(match[1]));
    });
    void exited.then(() => fail(`exited before it was ready (${exitText})`));
  });
  return { child, port: readyPort, exited };
}

/**
 * Starts a ClickHouse HTTP server on 127.0.0.1 and resolves once it answers /ping (rejects after 30 s, or at
 * once when the server gives up, with the server's stderr in the message).
 */
export async function startClickHouseServer(options: ClickHouseServerOptions = {}): Promise<ClickHouseServer> {
  let path = options.path;
  if (path === undefined) {
    path = mkdtempSync(join(tmpdir(), 'holdscope-clickhouse-'));
    ownedDirs.add(path);
  }
  const dataPath = path;
  let lastExit: ClickHouseServer['lastExit'];
  const onExit = (exit: NonNullable<ClickHouseServer['lastExit']>): void => {
    lastExit = exit;
  };

  const extras: ServerExtras = { tcpPort: options.tcpPort, configFile: options.configFile };
  let running: Running | undefined = await spawnServer(dataPath, options.port ?? 0, onExit, extras);
  const port = running.port;

  const signalAndWait = async (signal: NodeJS.Signals, escalateAfterMs?: number): Promise<void> => {
    const current = running;
    if (!current) return;
    // The child is unref'd: while waiting for its exit it must keep the event loop alive, or node:test sees an
    // empty loop and cancels the waiting test.
    current.child.ref();
    if (current.child.exitCode === null && current.child.signalCode === null) current.child.kill(signal);
    if (escalateAfterMs !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), escalateAfterMs);
      });
      const outcome = await Promise.race([current.exited, timedOut]);
      clearTimeout(timer);
      if (outcome === 'timeout') current.child.kill('SIGKILL');
    }
    await current.exited;
    current.child.unref();
    if (running === current) running = undefined;
  };

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    path: dataPath,
    get pid(): number {
      return running?.child.pid ?? -1;
    },
    get lastExit() {
      return lastExit;
    },
    stop: () => signalAndWait('SIGTERM', TERM_GRACE_MS),
    kill: () => signalAndWait('SIGKILL'),
    restart: async () => {
      await signalAndWait('SIGTERM', TERM_GRACE_MS);
      lastExit = undefined;
      running = await spawnServer(dataPath, port, onExit, extras);
    },
  };
}

/**
 * A @clickhouse/client for a test server, with holdscope's own query settings (common/clickhouse.ts):
 * `output_format_json_quote_64bit_integers: 0`, so UInt64/Int64 values (count() included) come back as JSON
 * numbers rather than strings, exactly as in production code (values above 2^53 lose precision: cast them
 * to String in SQL where that matters), and `date_time_input_format: 'best_effort'` for ISO timestamps.
 * A 10 s request timeout makes a hung server fail the test instead of stalling it. The client's own logger is
 * off: outage tests make requests fail on purpose, and each failure still rejects with its error.
 */
export function clickhouseClient(url: string, database?: string): ClickHouseClient {
  return createClient({
    url,
    database,
    username: 'default',
    password: '',
    request_timeout: 10_000,
    max_open_connections: 10,
    clickhouse_settings: { ...CLICKHOUSE_SETTINGS },
    log: { level: ClickHouseLogLevel.OFF },
  });
}
