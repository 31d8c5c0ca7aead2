// A process and its descendants, from /proc: what a command really left running (its children, their
// command lines), and what the benchmarks sum CPU time and resident memory over.

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** pid → ppid for every process (the field after the parenthesised command name). */
function parents(): Map<number, number> {
  const map = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      map.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  return map;
}

/** `root` and all its descendants. */
export function processTree(root: number): number[] {
  const ppid = parents();
  const tree = [root];
  for (let i = 0; i < tree.length; i++)
    for (const [pid, parent] of ppid) if (parent === tree[i]) tree.push(pid);
  return tree;
}

/** The process's arguments (argv joined by spaces); undefined once it has exited. */
export function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return undefined;
  }
}

/** The file the process runs (/proc/<pid>/exe); undefined once it has exited. */
export function executable(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return undefined;
  }
}
