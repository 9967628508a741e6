#!/usr/bin/env node
// A real ClickHouse HTTP server for tests, served by chdb's libchdb.so (ClickHouse 26.x as a library).
//
//   node scripts/chdb-server.mjs --path DIR [--port PORT] [--tcp-port PORT] [--config-file FILE] [--ready-timeout-ms MS]
//                                [--exit-with-stdin] [--no-precheck]
//
// It calls the clickhouse-local entry point `chdb_query_cmdline(int argc, char **argv)` (chdb.h) through ffi-rs
// on a thread of its own, with a multi-statement query that starts the HTTP listener and then runs a query that
// never ends: ClickHouse serves HTTP for as long as that query runs. Prints `ready <port>` on stdout once
// http://127.0.0.1:<port>/ping answers. `--port 0` (the default) lets ClickHouse pick a free port.
//
// Stops on SIGTERM, SIGINT or SIGHUP (and on stdin EOF with --exit-with-stdin) with exit code 0, at once: the
// process ends through _exit(2), because any normal Node exit waits forever for the ClickHouse thread. Data of
// finished INSERTs is already in the data directory's files by then.
//
// For a cluster of such servers (test/support/clickhouse-cluster.ts): `--config-file FILE` hands ClickHouse a
// config (macros, remote_servers, max_server_memory_usage, ...), and `--tcp-port PORT` (a fixed port, not 0:
// remote_servers in the other nodes' configs names it) also starts the native-protocol listener, which
// Distributed tables use between nodes. Without either, the server is HTTP only, as before.
//
// Exit codes: 0 stopped by a signal / stdin EOF; 1 ClickHouse failed to start (its own "Code: NNN" line is on
// stderr above the script's message); 2 bad arguments; 3 the data directory is locked by another ClickHouse
// process (what ClickHouse reports as Code: 76 "Cannot lock file <dir>/status"); 4 the port is in use
// (ClickHouse's Code: 210 "Address already in use"). Both conditions are checked before ClickHouse starts, for a
// message that names the cause (and the PID holding the lock); `--no-precheck` skips the checks, leaving it to
// ClickHouse: it prints its error on stderr and chdb_query_cmdline returns a result whose error pointer is NULL
// (reading that as a string is what crashes other callers, seconds later under chdb's signal handlers).
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { get } from 'node:http';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { DataType, isNullPointer, load, open } from 'ffi-rs';

const KEEPALIVE_QUERY_ID = 'chdb-server-keepalive';
const POLL_MS = 25;
const EWOULDBLOCK = 11;
const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

const say = (fd, text) => {
  try {
    writeSync(fd, `${text}\n`);
  } catch {
    // stdout/stderr closed: nothing left to tell
  }
};

// ---- libc: flock for the lock check, _exit for leaving without waiting for ClickHouse's thread ----
open({ library: 'libc', path: 'libc.so.6' });
let portFile;
function hardExit(code) {
  if (portFile) rmSync(portFile, { force: true });
  load({ library: 'libc', funcName: '_exit', retType: DataType.Void, paramsType: [DataType.I32], paramsValue: [code] });
}
function die(code, message) {
  say(2, `chdb-server: ${message}`);
  hardExit(code);
}

// ---- arguments ----
let args;
try {
  args = parseArgs({
    options: {
      path: { type: 'string' },
      port: { type: 'string', default: '0' },
      'tcp-port': { type: 'string' },
      'config-file': { type: 'string' },
      'ready-timeout-ms': { type: 'string', default: '15000' },
      'exit-with-stdin': { type: 'boolean', default: false },
      'no-precheck': { type: 'boolean', default: false },
    },
    strict: true,
  }).values;
} catch (err) {
  die(
    2,
    `${err.message}\nusage: node scripts/chdb-server.mjs --path DIR [--port PORT] [--tcp-port PORT] [--config-file FILE] [--ready-timeout-ms MS] [--exit-with-stdin]`,
  );
}
if (!args.path) die(2, '--path DIR is required');
const dataPath = resolve(args.path);
const port = Number(args.port);
const readyTimeoutMs = Number(args['ready-timeout-ms']);
if (!Number.isInteger(port) || port < 0 || port > 65535) die(2, `--port must be an integer in 0..65535, got ${args.port}`);
const tcpPort = args['tcp-port'] === undefined ? undefined : Number(args['tcp-port']);
if (tcpPort !== undefined && (!Number.isInteger(tcpPort) || tcpPort < 1 || tcpPort > 65535))
  die(2, `--tcp-port must be an integer in 1..65535, got ${args['tcp-port']}`);
const configFile = args['config-file'] === undefined ? undefined : resolve(args['config-file']);
if (configFile !== undefined && !existsSync(configFile)) die(2, `--config-file ${configFile} does not exist`);
if (!Number.isFinite(readyTimeoutMs) || readyTimeoutMs <= 0)
  die(2, `--ready-timeout-ms must be a positive number, got ${args['ready-timeout-ms']}`);

// ClickHouse installs signal handlers of its own when it starts (SIGTERM then no longer ends the process), so
// these are installed again once it is ready: libuv restores SIG_DFL when the last listener goes and puts its
// own handler back when one is added.
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'];
const onStopSignal = () => hardExit(0);
function installSignalHandlers() {
  for (const signal of STOP_SIGNALS) {
    process.removeListener(signal, onStopSignal);
    process.on(signal, onStopSignal);
  }
}
installSignalHandlers();
if (args['exit-with-stdin']) {
  process.stdin.on('end', () => hardExit(0));
  process.stdin.on('close', () => hardExit(0));
  process.stdin.on('error', () => hardExit(0));
  process.stdin.resume();
}
process.on('uncaughtException', (err) => die(1, `internal error: ${err?.stack ?? err}`));
process.on('unhandledRejection', (err) => die(1, `internal error: ${err?.stack ?? err}`));

// ---- checks ClickHouse would otherwise fail on with a crash a few seconds later ----
try {
  mkdirSync(dataPath, { recursive: true });
} catch (err) {
  die(1, `cannot create data directory ${dataPath}: ${err.message}`);
}

/** ClickHouse holds flock(LOCK_EX) on <path>/status while it runs; the same test, without keeping the lock. */
function checkNotLocked() {
  const statusPath = join(dataPath, 'status');
  if (!existsSync(statusPath)) return;
  const fd = openSync(statusPath, 'r');
  try {
    const result = load({
      library: 'libc',
      funcName: 'flock',
      retType: DataType.I32,
      paramsType: [DataType.I32, DataType.I32],
      paramsValue: [fd, LOCK_EX | LOCK_NB],
      errno: true,
    });
    if (result.value === 0) {
      load({
        library: 'libc',
        funcName: 'flock',
        retType: DataType.I32,
        paramsType: [DataType.I32, DataType.I32],
        paramsValue: [fd, LOCK_UN],
      });
      return;
    }
    if (result.errnoCode !== EWOULDBLOCK) return; // cannot tell: let ClickHouse decide
    let holder = '';
    try {
      const pid = /^PID: (\d+)/m.exec(readFileSync(statusPath, 'utf8'))?.[1];
      if (pid) holder = ` (PID ${pid} according to the status file)`;
    } catch {
      // unreadable status file: no PID to report
    }
    die(
      3,
      `data directory ${dataPath} is locked by another ClickHouse process${holder}: ClickHouse would fail with Code: 76. DB::Exception: Cannot lock file ${statusPath}. Another server instance in same directory is already running. (CANNOT_OPEN_FILE)`,
    );
  } finally {
    closeSync(fd);
  }
}

function checkPortFree(port) {
  if (port === 0) return Promise.resolve();
  return new Promise((resolvePromise) => {
    const probe = createServer();
    probe.once('error', (err) => {
      if (err.code === 'EADDRINUSE')
        die(
          4,
          `port ${port} on 127.0.0.1 is already in use: ClickHouse would fail with Code: 210. DB::Exception: Listen [127.0.0.1]:${port} failed (NETWORK_ERROR: Address already in use)`,
        );
      else die(4, `cannot listen on 127.0.0.1:${port}: ${err.message}`);
    });
    probe.listen({ port, host: '127.0.0.1', exclusive: true }, () => probe.close(() => resolvePromise()));
  });
}

if (!args['no-precheck']) {
  checkNotLocked();
  await checkPortFree(port);
  if (tcpPort !== undefined) await checkPortFree(tcpPort);
}

// ---- start ClickHouse ----
const require = createRequire(import.meta.url);
const libPath = join(dirname(require.resolve('@chdb/lib-linux-x64-gnu/package.json')), 'libchdb.so');
if (!existsSync(libPath)) die(1, `${libPath} is missing (is the chdb package installed?)`);
open({ library: 'chdb', path: libPath });
// Without this, chdb's handlers for SIGSEGV/SIGABRT/... sleep for minutes before the process dies: a crashed
// server would look like a hung one. (It resets those signals to SIG_DFL; this script runs no WebAssembly.)
load({
  library: 'chdb',
  funcName: 'chdb_set_signal_handlers_enabled',
  retType: DataType.Void,
  paramsType: [DataType.I32],
  paramsValue: [0],
});

// ClickHouse writes the port it listens on here once `SYSTEM START LISTEN HTTP` succeeded (so --port 0 works).
portFile = join(tmpdir(), `chdb-server-${process.pid}-${randomBytes(4).toString('hex')}.port`);
const sqlString = (s) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
const query = [
  ...(tcpPort === undefined ? [] : ['SYSTEM START LISTEN TCP']),
  'SYSTEM START LISTEN HTTP',
  `SELECT getServerPort('http_port') INTO OUTFILE ${sqlString(portFile)} TRUNCATE FORMAT TSV`,
  // One row a second for ever: the server lives as long as this query (sleepEachRow's 3 s cap lifted below).
  'SELECT sleepEachRow(1) FROM system.numbers SETTINGS max_block_size = 1 FORMAT Null',
].join('; ');
const argv = [
  'clickhouse',
  ...(configFile === undefined ? [] : [`--config-file=${configFile}`]),
  `--path=${dataPath}`,
  ...(tcpPort === undefined ? [] : [`--tcp_port=${tcpPort}`]),
  `--http_port=${port}`,
  '--listen_host=127.0.0.1',
  '--function_sleep_max_microseconds_per_block=0',
  `--query_id=${KEEPALIVE_QUERY_ID}`,
  '--multiquery',
  '--query',
  query,
];

load({
  library: 'chdb',
  funcName: 'chdb_query_cmdline',
  retType: DataType.External,
  paramsType: [DataType.I32, DataType.StringArray],
  paramsValue: [argv.length, argv],
  runInNewThread: true,
}).then(
  (result) => {
    // The endless query ended: ClickHouse refused the arguments or failed before serving.
    let error = 'it printed why on stderr';
    const errorPointer = load({
      library: 'chdb',
      funcName: 'chdb_result_error',
      retType: DataType.External,
      paramsType: [DataType.External],
      paramsValue: [result],
    });
    if (!isNullPointer(errorPointer)) {
      error = load({
        library: 'chdb',
        funcName: 'chdb_result_error',
        retType: DataType.String,
        paramsType: [DataType.External],
        paramsValue: [result],
      });
    }
    die(1, `ClickHouse stopped before serving: ${String(error).trim()}`);
  },
  (err) => die(1, `calling chdb_query_cmdline failed: ${err?.message ?? err}`),
);

function ping(onPort) {
  return new Promise((resolvePromise) => {
    const request = get({ host: '127.0.0.1', port: onPort, path: '/ping', agent: false, timeout: 1000 }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolvePromise(response.statusCode === 200 && body.trim() === 'Ok.'));
      response.on('error', () => resolvePromise(false));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolvePromise(false));
  });
}

const deadline = Date.now() + readyTimeoutMs;
let listening = 0;
while (true) {
  if (!listening && existsSync(portFile)) {
    const written = Number(readFileSync(portFile, 'utf8').trim());
    if (Number.isInteger(written) && written > 0) listening = written;
  }
  if (listening && (await ping(listening))) break;
  if (Date.now() > deadline) {
    die(
      1,
      `ClickHouse did not answer on http://127.0.0.1:${listening || port}/ping within ${readyTimeoutMs} ms` +
        ' (a "Code: NNN" line from ClickHouse above says why: Code 210 = port in use, Code 76 = data directory locked)',
    );
  }
  await new Promise((r) => setTimeout(r, POLL_MS));
}
rmSync(portFile, { force: true });
portFile = undefined;
installSignalHandlers();
say(1, `ready ${listening}`);
