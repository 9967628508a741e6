import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Socket } from 'node:net';

const STDERR_KEEP_CHARS = 16_384;

/**
 * Lets a spawned service run without keeping the test process alive (tests still stop it in an after hook),
 * and keeps the tail of its stderr for error messages. Returns the text to append to such a message.
 */
export function detachWithStderrTail(child: ChildProcessWithoutNullStreams): () => string {
  for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as unknown as Socket).unref();
  child.unref();
  child.stdin.on('error', () => {}); // EPIPE after the child died: reported through 'exit' instead
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP_CHARS);
  });
  return () => (stderr.trim() ? `; stderr:\n${stderr.trim()}` : '; stderr was empty');
}
