import { setTimeout as sleep } from 'node:timers/promises';
import { procMemoryKb } from '../support/collector-process.ts';
import { spawnPipeline as spawnTestPipeline, type PipelineProcess } from '../support/pipeline-process.ts';

/**
 * The V8 heap limit docs/operations.md recommends for a pipeline process. Without one, V8 sizes its heap from the
 * machine's memory and lets garbage pile up to several hundred MiB before collecting it.
 */
export const PIPELINE_HEAP_MB = 192;

/** Flags every pipeline process of the run gets after its own (`--pipeline-flags`): one run per setting compared. */
let extraFlags: readonly string[] = [];
export function setPipelineFlags(flags: readonly string[]): void {
  extraFlags = flags;
}

/** `holdscope pipeline` as its own process, as production runs it (heap limit included), so its memory is its own. */
export function spawnPipeline(args: string[]): Promise<PipelineProcess> {
  const nodeOptions = [process.env.NODE_OPTIONS, `--max-old-space-size=${PIPELINE_HEAP_MB}`].filter(Boolean).join(' ');
  return spawnTestPipeline('bench', [...args, ...extraFlags], { NODE_OPTIONS: nodeOptions });
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
    let peakSampledKb = 0;
    const deadline = Date.now() + 30 * 60_000;
    while (rows < expectedRows) {
      if (Date.now() > deadline) throw new Error(`the pipeline stored ${rows} of ${expectedRows} rows in 30 minutes`);
      await sleep(50);
      const m = await pipeline.metrics();
      if (!first && (m.holdscope_pipeline_messages_total ?? 0) > 0) first = performance.now();
      rows = m.holdscope_pipeline_rows_inserted_total ?? 0;
      peakSampledKb = Math.max(peakSampledKb, procMemoryKb(pipeline.pid)?.rss ?? 0);
      onProgress?.(rows);
    }
    const seconds = (performance.now() - first) / 1000;
    const peakRssMiB = Math.max(peakSampledKb, procMemoryKb(pipeline.pid)?.hwm ?? 0) / 1024;
    return { rows, seconds, spansPerSecond: rows / seconds, peakRssMiB };
  } finally {
    await pipeline.stop();
  }
}
