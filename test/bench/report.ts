export interface Figure {
  name: string;
  value: number;
  unit: string;
  note?: string;
  goal?: string;
  ok?: boolean;
}

/** One updating status line on a terminal; nothing when stderr is a file or a pipe (CI logs stay clean). */
export function progress(text: string): void {
  if (!process.stderr.isTTY) return;
  process.stderr.write(`\r\x1b[K${text.slice(0, (process.stderr.columns ?? 100) - 1)}`);
}

const benchStarted = Date.now();
/** A line per phase on stderr, with the time into the run: the record of where a long run spent its time. */
export function stage(text: string): void {
  progress('');
  process.stderr.write(`[${((Date.now() - benchStarted) / 1000).toFixed(0).padStart(4)} s] ${text}\n`);
}

/**
 * The run's figures, each also written to stderr as it is measured: a run that fails in a later stage (say, ClickHouse
 * gone while the query dataset is built, 15 minutes in) still leaves the figures of the stages before it.
 */
export class FigureSheet {
  private readonly figures: Figure[] = [];

  add(figure: Figure): void {
    this.figures.push(figure);
    const goal = figure.goal ? ` (goal ${figure.goal}: ${figure.ok ? 'met' : 'NOT MET'})` : '';
    stage(`  ${figure.name}: ${figure.value.toLocaleString('en-US')} ${figure.unit}${goal}`.trimEnd());
  }

  all(): Figure[] {
    return [...this.figures];
  }
}

export function report(
  figures: Figure[],
  run: { machine: string; command: string; seconds: number; json: Record<string, number | null> },
): void {
  progress('');
  const rows = figures.map((f) => [
    f.name,
    `${f.value.toLocaleString('en-US')} ${f.unit}`.trim(),
    f.goal ? `${f.goal} ${f.ok ? 'met' : 'NOT MET'}` : '',
    f.note ?? '',
  ]);
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => (r[i] as string).length), ['figure', 'value', 'goal'][i]?.length ?? 0));
  const line = (r: string[]) => r.map((cell, i) => (i < 3 ? cell.padEnd(widths[i] as number) : cell)).join('  ');
  console.log(`holdscope bench: ${run.command} on ${run.machine}, ${run.seconds.toFixed(0)} s`);
  console.log(line(['figure', 'value', 'goal', 'how']));
  for (const r of rows) console.log(line(r));
  console.log(JSON.stringify(run.json));
}
