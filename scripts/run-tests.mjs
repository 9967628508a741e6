#!/usr/bin/env node
// Runs every *.test.ts under the project with node's own test runner (tsx as the loader).
// Node 20's runner takes no globs, so the files are listed here. `--only unit|integration|faults` narrows the set:
// integration tests live under test/integration, the long fault-injection runs under test/faults, unit tests elsewhere.
import { readdirSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const skipDirs = new Set(['node_modules', '.git', '.data', 'dist', '.tmp', 'docs']);
const onlyIndex = process.argv.indexOf('--only');
const only = onlyIndex >= 0 ? process.argv[onlyIndex + 1] : undefined;
const explicit = process.argv.slice(2).filter((arg, i, all) => !arg.startsWith('--') && all[i - 1] !== '--only');

function findTests(dir, found = []) {
  for (const entry of readdirSync(dir)) {
    if (skipDirs.has(entry) || entry.startsWith('.')) continue;
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) findTests(path, found);
    else if (entry.endsWith('.test.ts')) found.push(relative(root, path));
  }
  return found;
}

let files = explicit.length > 0 ? explicit : findTests(root).sort();
const kindOf = (f) => (f.startsWith('test/integration/') ? 'integration' : f.startsWith('test/faults/') ? 'faults' : 'unit');
if (only !== undefined && !['unit', 'integration', 'faults'].includes(only)) {
  console.error(`holdscope: --only expects unit, integration or faults, got ${JSON.stringify(only)}`);
  process.exit(2);
}
if (only) files = files.filter((f) => kindOf(f) === only);
if (files.length === 0) {
  console.error('holdscope: no test files found');
  process.exit(1);
}
const args = ['--import', 'tsx', '--test', '--test-concurrency=2', ...files];
const result = spawnSync(process.execPath, args, {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, HOLDSCOPE_LOG_LEVEL: process.env.HOLDSCOPE_LOG_LEVEL ?? 'warn' },
});
process.exit(result.status ?? 1);
