// The files of a labelled folder: every regular file below it, depth first, in name order.

import { opendir } from 'node:fs/promises';
import path from 'node:path';

/** Every regular file under `dir`, depth first, in name order, read lazily (dot files skipped). */
export async function* walk(dir: string): AsyncGenerator<string> {
  const entries: { name: string; isDir: boolean; isFile: boolean }[] = [];
  for await (const e of await opendir(dir))
    entries.push({ name: e.name, isDir: e.isDirectory(), isFile: e.isFile() });
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDir) yield* walk(p);
    else if (e.isFile && !e.name.startsWith('.')) yield p;
  }
}

export async function count(dir: string): Promise<number> {
  let n = 0;
  for await (const _ of walk(dir)) n++;
  return n;
}
