/**
 * librdkafka's mock Kafka cluster (real Kafka wire protocol over TCP, in memory) as a child process that
 * tests start and control: create topics, take brokers down and up without losing data, slow them down.
 *
 * The program is scripts/kafka-mock/kafka-mock.c, compiled on first use against Debian's librdkafka-dev.
 * What kafkajs can and cannot do against it: docs in /work/shared/notes/infrastructure.md, in short:
 * - create topics with `createTopic` (kafkajs `admin.createTopics` fails against the mock);
 * - no idempotent or transactional producers, no listGroups/describeGroups/resetOffsets;
 * - consumers: use KAFKA_TEST_SESSION_TIMEOUT_MS / KAFKA_TEST_HEARTBEAT_INTERVAL_MS (or
 *   `testConsumerConfig`), the first group join still takes about 3 s;
 * - everything lives in memory: stopping the mock loses every message, `brokerDown` does not.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel, type ConsumerConfig } from 'kafkajs';
import { detachWithStderrTail } from './detached.ts';

const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SOURCE = join(PROJECT_ROOT, 'scripts', 'kafka-mock', 'kafka-mock.c');
const BINARY = join(PROJECT_ROOT, 'node_modules', '.cache', 'holdscope', 'kafka-mock');
const MOCK_HEADER = '/usr/include/librdkafka/rdkafka_mock.h';
const INSTALL_HINT = 'run `npm test` as root (it installs them) or `apt-get install librdkafka-dev gcc libc6-dev`';

const READY_TIMEOUT_MS = 10_000;
const COMMAND_TIMEOUT_MS = 5_000;
const QUIT_GRACE_MS = 2_000;
const TERM_GRACE_MS = 2_000;

/** Consumer session timeout that lets the mock complete group joins quickly (2 s never completes one). */
export const KAFKA_TEST_SESSION_TIMEOUT_MS = 6000;
/** Consumer heartbeat interval to go with KAFKA_TEST_SESSION_TIMEOUT_MS. */
export const KAFKA_TEST_HEARTBEAT_INTERVAL_MS = 1000;

export interface KafkaMockOptions {
  /** Number of brokers, ids 1..brokers (default 3). */
  brokers?: number;
  /** Topics created before `startKafkaMock` resolves. */
  topics?: { name: string; partitions: number }[];
}

export interface KafkaMock {
  /** Bootstrap addresses, `127.0.0.1:port`, one per broker, in broker id order. */
  readonly brokers: string[];
  /** Broker ids as the mock numbers them: 1..n (not 0-based). */
  readonly brokerIds: number[];
  createTopic(name: string, partitions: number): Promise<void>;
  /** Disconnects the broker's clients and refuses new connections; its data stays. No leader change. */
  brokerDown(id: number): Promise<void>;
  brokerUp(id: number): Promise<void>;
  allDown(): Promise<void>;
  allUp(): Promise<void>;
  /** Adds `ms` of round-trip latency to every response of the broker (0 to clear). */
  setRtt(id: number, ms: number): Promise<void>;
  /** Ends the mock (every message is lost). Idempotent. */
  stop(): Promise<void>;
}

/**
 * Path to the compiled mock, compiling scripts/kafka-mock/kafka-mock.c when the binary is missing or older
 * than the source. Safe when several test processes call it at once (compile to a temp file, then rename).
 */
export function ensureKafkaMockBinary(): string {
  if (existsSync(BINARY) && statSync(BINARY).mtimeMs >= statSync(SOURCE).mtimeMs) return BINARY;
  const gcc = spawnSync('gcc', ['--version'], { encoding: 'utf8' });
  if (gcc.error || gcc.status !== 0) {
    throw new Error(`kafka-mock: gcc is not available (${gcc.error?.message ?? `exit ${gcc.status}`}); ${INSTALL_HINT}`);
  }
  if (!existsSync(MOCK_HEADER)) {
    throw new Error(`kafka-mock: ${MOCK_HEADER} is missing (librdkafka-dev is not installed); ${INSTALL_HINT}`);
  }
  mkdirSync(dirname(BINARY), { recursive: true });
  const tmp = `${BINARY}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const result = spawnSync('gcc', ['-O2', '-o', tmp, SOURCE, '-lrdkafka'], { encoding: 'utf8' });
  if (result.error || result.status !== 0) {
    rmSync(tmp, { force: true });
    const output = `${result.error?.message ?? ''}${result.stderr ?? ''}`.trim();
    throw new Error(`kafka-mock: compiling ${SOURCE} failed: ${output}\nIf a header or library is missing, ${INSTALL_HINT}`);
  }
  renameSync(tmp, BINARY);
  return BINARY;
}

// Children still running, killed when this process exits so a forgotten stop() leaves no orphan. (The mock
// also exits on stdin EOF, which covers this process being killed outright.)
const live = new Set<ChildProcessWithoutNullStreams>();
let exitHookInstalled = false;
function track(child: ChildProcessWithoutNullStreams): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
  live.add(child);
  child.once('exit', () => live.delete(child));
}

function checkInt(what: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): void {
  if (!Number.isInteger(value) || value < min || value > max)
    throw new RangeError(`kafka-mock: ${what} must be an integer in ${min}..${max}, got ${value}`);
}

function checkTopic(name: string): void {
  if (!/^[a-zA-Z0-9._-]{1,249}$/.test(name)) throw new RangeError(`kafka-mock: invalid topic name ${JSON.stringify(name)}`);
}

/**
 * Starts a mock cluster and resolves once it prints its bootstrap list (rejects after 10 s, with the
 * program's stderr). The child does not keep the event loop alive by itself; call stop() in an after hook.
 */
export async function startKafkaMock(options: KafkaMockOptions = {}): Promise<KafkaMock> {
  const brokerCount = options.brokers ?? 3;
  checkInt('brokers', brokerCount, 1, 64);
  const args = [String(brokerCount)];
  for (const topic of options.topics ?? []) {
    checkTopic(topic.name);
    checkInt('partitions', topic.partitions, 1, 100_000);
    args.push('--topic', `${topic.name}:${topic.partitions}`);
  }

  const child = spawn(ensureKafkaMockBinary(), args, { stdio: ['pipe', 'pipe', 'pipe'] });
  track(child);
  const describeStderr = detachWithStderrTail(child);

  let exited: string | undefined;
  const exitedPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = signal ? `signal ${signal}` : `exit code ${code}`;
      resolve();
    });
  });
  // A line handler: first the bootstrap line, then one answer per command.
  let onLine: ((line: string) => void) | undefined;
  let onExit: (() => void) | undefined;
  createInterface({ input: child.stdout }).on('line', (line) => onLine?.(line));
  void exitedPromise.then(() => onExit?.());
  child.once('error', (err) => {
    exited = `spawn error: ${err.message}`;
    onExit?.();
  });

  const bootstrap = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kafka-mock: no bootstrap line within ${READY_TIMEOUT_MS} ms${describeStderr()}`));
    }, READY_TIMEOUT_MS);
    onLine = (line) => {
      clearTimeout(timer);
      const match = /^bootstrap (\S+)$/.exec(line);
      if (match?.[1]) resolve(match[1]);
      else {
        child.kill('SIGKILL');
        reject(new Error(`kafka-mock: unexpected first line ${JSON.stringify(line)}${describeStderr()}`));
      }
    };
    onExit = () => {
      clearTimeout(timer);
      reject(new Error(`kafka-mock: exited before it was ready (${exited})${describeStderr()}`));
    };
  });
  onLine = onExit = undefined;
  const brokers = bootstrap.split(',');

  // Commands run one at a time: each waits for its own ok/error line.
  let tail: Promise<unknown> = Promise.resolve();
  let stopping = false;
  const send = (command: string): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      if (exited !== undefined || stopping) {
        reject(new Error(`kafka-mock: "${command}" after the mock ${stopping ? 'was stopped' : `exited (${exited})`}`));
        return;
      }
      const timer = setTimeout(() => {
        onLine = onExit = undefined;
        // A late answer would be taken for the next command's: a mock this stuck is killed instead.
        child.kill('SIGKILL');
        reject(new Error(`kafka-mock: no answer to "${command}" within ${COMMAND_TIMEOUT_MS} ms${describeStderr()}`));
      }, COMMAND_TIMEOUT_MS);
      onLine = (line) => {
        clearTimeout(timer);
        onLine = onExit = undefined;
        if (line === 'ok') resolve();
        else reject(new Error(`kafka-mock: "${command}" failed: ${line.replace(/^error /, '')}`));
      };
      onExit = () => {
        clearTimeout(timer);
        onLine = onExit = undefined;
        reject(new Error(`kafka-mock: exited (${exited}) while running "${command}"${describeStderr()}`));
      };
      child.stdin.write(`${command}\n`);
    });
  const command = (line: string): Promise<void> => {
    const result = tail.then(() => send(line));
    tail = result.catch(() => {});
    return result;
  };
  const brokerId = (id: number): number => {
    checkInt('broker id', id, 1, brokerCount);
    return id;
  };

  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      stopping = true;
      if (exited !== undefined) return;
      child.ref(); // keep this process alive until the exit is seen, even after SIGKILL
      const waitExit = (ms: number): Promise<boolean> =>
        new Promise((resolve) => {
          const timer = setTimeout(() => resolve(false), ms);
          void exitedPromise.then(() => {
            clearTimeout(timer);
            resolve(true);
          });
        });
      child.stdin.end('quit\n');
      if (await waitExit(QUIT_GRACE_MS)) return;
      child.kill('SIGTERM');
      if (await waitExit(TERM_GRACE_MS)) return;
      child.kill('SIGKILL');
      await exitedPromise;
    })();
    return stopped;
  };

  return {
    brokers,
    brokerIds: Array.from({ length: brokerCount }, (_, i) => i + 1),
    createTopic: async (name, partitions) => {
      checkTopic(name);
      checkInt('partitions', partitions, 1, 100_000);
      await command(`create ${name} ${partitions}`);
    },
    brokerDown: async (id) => command(`down ${brokerId(id)}`),
    brokerUp: async (id) => command(`up ${brokerId(id)}`),
    allDown: () => command('down-all'),
    allUp: () => command('up-all'),
    setRtt: async (id, ms) => {
      checkInt('rtt ms', ms, 0, 2_147_483_647);
      await command(`rtt ${brokerId(id)} ${ms}`);
    },
    stop,
  };
}

let topicCounter = 0;
/** A topic name no other call (in any process) returns: `<prefix>-<time>-<counter>-<random>`. */
export function randomTopic(prefix = 'test'): string {
  const safe = prefix.replace(/[^a-zA-Z0-9._-]/g, '-').slice(0, 200) || 'test';
  return `${safe}-${Date.now().toString(36)}-${++topicCounter}-${randomBytes(4).toString('hex')}`;
}

/**
 * A kafkajs client tuned for the mock: silent, fast to give up (short connection timeout, few quick retries),
 * so an outage shows up as a rejected promise in seconds rather than a hang. Producers and consumers created
 * from it can still override `retry`. For consumers use `testConsumerConfig` (or the two constants).
 */
export function kafkaForTests(brokers: string[], clientId = 'holdscope-test'): Kafka {
  return new Kafka({
    clientId,
    brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 1000,
    authenticationTimeout: 1000,
    requestTimeout: 5000,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000, factor: 0.2, multiplier: 2 },
  });
}

/** Consumer settings under which the mock completes group joins quickly (first join still ~3 s). */
export function testConsumerConfig(groupId: string, overrides: Partial<ConsumerConfig> = {}): ConsumerConfig {
  return {
    groupId,
    sessionTimeout: KAFKA_TEST_SESSION_TIMEOUT_MS,
    heartbeatInterval: KAFKA_TEST_HEARTBEAT_INTERVAL_MS,
    rebalanceTimeout: 10_000,
    maxWaitTimeInMs: 200,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
    ...overrides,
  };
}
