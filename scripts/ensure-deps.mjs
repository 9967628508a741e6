#!/usr/bin/env node
// Makes a fresh clone runnable: installs node modules when they are absent or older than the lock file,
// and (for `--for test`, as root) the Debian packages the test suite talks to. Plain Node, no dependencies,
// because it runs before anything is installed.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const purpose = process.argv.includes('--for') ? process.argv[process.argv.indexOf('--for') + 1] : 'start';

// Debian packages each purpose needs, with the binary that proves each is present.
const debianPackages = {
  start: [],
  test: [
    // librdkafka's mock cluster: the Kafka wire-protocol broker the tests run (test/support/kafka-mock.ts).
    { name: 'librdkafka-dev', probe: ['/usr/include/librdkafka/rdkafka_mock.h'] },
    { name: 'gcc', probe: ['/usr/bin/gcc'] },
    { name: 'libc6-dev', probe: ['/usr/include/stdio.h'] },
    // promtool: checks and unit-tests the alerting rules (test/integration/alert-rules.test.ts).
    { name: 'prometheus', probe: ['/usr/bin/promtool'] },
    // Alertmanager: receives the violation alerts holdscope pushes and the rules' alerts (test/integration/alerting-e2e.test.ts).
    { name: 'prometheus-alertmanager', probe: ['/usr/bin/prometheus-alertmanager'] },
    // Headless browser for the on-call page test (test/integration/dashboard-browser.test.ts, playwright-core).
    { name: 'chromium', probe: ['/usr/bin/chromium'] },
  ],
};

function run(cmd, args, { exitOnFailure = true, quiet = false } = {}) {
  const result = spawnSync(cmd, args, { cwd: root, stdio: quiet ? ['ignore', 'ignore', 'pipe'] : 'inherit' });
  if (result.status !== 0 && exitOnFailure) {
    console.error(`holdscope: '${cmd} ${args.join(' ')}' failed with exit code ${result.status}`);
    process.exit(result.status ?? 1);
  }
  return result.status === 0;
}

function ensureNodeModules() {
  const lockPath = join(root, 'package-lock.json');
  const stampPath = join(root, 'node_modules', '.holdscope-lock-hash');
  const lockHash = createHash('sha256').update(readFileSync(lockPath)).digest('hex');
  const installed = existsSync(stampPath) ? readFileSync(stampPath, 'utf8').trim() : '';
  if (installed === lockHash) return;
  console.error(
    installed ? 'holdscope: package-lock.json changed, reinstalling node modules (npm ci)' : 'holdscope: installing node modules (npm ci)',
  );
  // `npm ci` installs exactly the lock file, and fails when package.json and the lock disagree: that failure is a bug to
  // fix in the lock, not to work around here. The lock names chdb's builds for other platforms (without integrity,
  // since a registry mirror may lack them) so that npm ci accepts it; npm skips them by their os and cpu.
  run('npm', ['ci', '--no-audit', '--no-fund']);
  writeFileSync(stampPath, lockHash + '\n');
}

function ensureDebianPackages(list) {
  const missing = list.filter(({ probe }) => !probe.some((path) => existsSync(path)));
  if (missing.length === 0) return;
  const names = missing.map(({ name }) => name);
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    console.error(`holdscope: missing Debian packages ${names.join(' ')}; install them with: sudo apt-get install -y ${names.join(' ')}`);
    process.exit(1);
  }
  console.error(`holdscope: installing Debian packages ${names.join(' ')}`);
  run('apt-get', ['update', '-qq']);
  run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...names]);
}

ensureNodeModules();
ensureDebianPackages(debianPackages[purpose] ?? []);
