// The JPEG fast path on many files, in a child process (fast-path-child.ts) under a stall bound: a
// decode that never returns is reported as hung, with its file, instead of wedging the test run.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnChild } from '../support/children.ts';

const CHILD = fileURLToPath(new URL('fast-path-child.ts', import.meta.url));

/**
 * PDQ's reduce sides the child decodes with (pdq.ts's pdqReduce): 0 never averages; 100 and 64 average
 * most of the space's frames over blocks of several sizes first, remainders dropped (the decoder skips
 * the rows under the last blocks that the model does not need). The service's 512 is the same code with
 * another number.
 */
export const PDQ_SIDES: readonly number[] = [0, 100, 64];

/** One decode takes milliseconds; only a decode that never returns goes past this. */
export const STALL_MS = 10_000;

export type FastPathResult =
  | { declined: string }
  | {
      width: number;
      height: number;
      sha256: string;
      /** The decodes with PDQ's filter (PDQ_SIDES): each one's tensor and downsample digests, or why it declined. */
      withPdq: ({ side: number; sha256: string; pdq: string } | { side: number; declined: string })[];
    }
  /** The child stopped answering on this file (then killed) or died on it, with its output. */
  | { hung: true }
  | { crashed: string };

/** One result per path, in order; after a file that hung or crashed, a fresh child goes on. */
export async function fastPathInChild(
  paths: readonly string[],
  size: number,
  maxPixels: number,
  listDir: string,
): Promise<FastPathResult[]> {
  const results: FastPathResult[] = [];
  while (results.length < paths.length) {
    const rest = paths.slice(results.length);
    const done = await runChild(rest, size, maxPixels, listDir);
    results.push(...done.results);
    if (done.stopped) results.push(done.stopped);
  }
  return results;
}

async function runChild(
  paths: readonly string[],
  size: number,
  maxPixels: number,
  listDir: string,
): Promise<{ results: FastPathResult[]; stopped?: FastPathResult }> {
  const list = join(listDir, 'fast-path-list.txt');
  writeFileSync(list, `${paths.join('\n')}\n`);
  const child = spawnChild('jpeg fast path', process.execPath, [
    CHILD,
    String(size),
    String(maxPixels),
    list,
  ]);
  const results: FastPathResult[] = [];
  let pending = '';
  let stalled: () => void = () => {};
  const stall = new Promise<'stalled'>((resolve) => {
    stalled = () => resolve('stalled');
  });
  let timer = setTimeout(stalled, STALL_MS);
  child.proc.stdout?.on('data', (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) if (line.startsWith('{')) results.push(JSON.parse(line) as FastPathResult);
    clearTimeout(timer);
    timer = setTimeout(stalled, STALL_MS);
  });
  const ended = await Promise.race([child.exited, stall]);
  clearTimeout(timer);
  if (ended === 'stalled') {
    await child.kill();
    return { results, stopped: { hung: true } };
  }
  await child.stop();
  if (ended !== 0 || results.length !== paths.length)
    return { results, stopped: { crashed: `exit ${ended}: ${child.output().slice(-2000)}` } };
  return { results };
}
