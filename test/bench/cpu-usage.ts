/**
 * CPU used while a stage's load runs, from /proc (Linux): how busy the host was, and how many cores each of the
 * stack's processes took. A latency figure at an offered load means little without it: a host near 100 % busy is
 * saturated, and every queue on it grows with the run's length.
 */
import { readFileSync } from 'node:fs';

interface CpuSnapshot {
  /** When it was taken (ms since the epoch). */
  atMs: number;
  /** The host's CPU time, in /proc/stat's ticks, summed over every core. */
  hostTotal: number;
  hostIdle: number;
  /** Each named process's user + system time, in the same ticks (NaN once it is gone). */
  processes: Record<string, number>;
}

export interface CpuUsage {
  /** Busy share of all the host's cores over the interval, 0..1. */
  hostBusy: number;
  cores: number;
  /** Cores each named process used on average over the interval. */
  processCores: Record<string, number>;
  /** The interval, wall clock (ms since the epoch). */
  fromMs: number;
  toMs: number;
}

function processTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may hold spaces and parentheses): utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return NaN;
  }
}

export function snapshotCpu(pids: Record<string, number>): CpuSnapshot {
  const [, ...ticks] = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/);
  const values = ticks.map(Number);
  // user nice system idle iowait irq softirq steal (guest time is counted in user already)
  const hostTotal = values.slice(0, 8).reduce((a, b) => a + b, 0);
  const hostIdle = (values[3] ?? 0) + (values[4] ?? 0);
  const processes: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) processes[name] = processTicks(pid);
  return { atMs: Date.now(), hostTotal, hostIdle, processes };
}

/** Usage between two snapshots. Process cores are relative to the host's ticks, so no clock rate is assumed. */
export function cpuBetween(before: CpuSnapshot, after: CpuSnapshot, cores: number): CpuUsage {
  const total = after.hostTotal - before.hostTotal;
  const processCores: Record<string, number> = {};
  for (const [name, ticks] of Object.entries(after.processes))
    processCores[name] = total > 0 ? ((ticks - (before.processes[name] ?? NaN)) / total) * cores : NaN;
  const hostBusy = total > 0 ? 1 - (after.hostIdle - before.hostIdle) / total : NaN;
  return { hostBusy, cores, processCores, fromMs: before.atMs, toMs: after.atMs };
}
