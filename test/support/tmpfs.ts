// A real tmpfs of a set size, mounted for a test (root only): a disk that really fills up (ENOSPC at the
// byte) and really turns read-only (EROFS), with no loop device or image file. `mountTmpfs` returns
// undefined when this process may not mount (not root, or a container without CAP_SYS_ADMIN): the
// suite then says so and skips, and fails under CI=true (CI runs as root).

import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Tmpfs {
  readonly dir: string;
  /** Writes a filler file until the file system refuses with ENOSPC; returns its path. */
  fill(): string;
  /** Removes the filler (space again). */
  free(): void;
  /** Remounts read-only (refused by the kernel while a file on it is open for writing). */
  readOnly(): void;
  readWrite(): void;
  /** Unmounts and removes the mount point; safe to call twice. */
  unmount(): void;
}

function mount(args: string[]): { ok: boolean; error: string } {
  const r = spawnSync('mount', args, { encoding: 'utf8' });
  return { ok: r.status === 0, error: `${r.stderr ?? ''}${r.error?.message ?? ''}`.trim() };
}

/** Why a tmpfs cannot be mounted here, or undefined when it can. */
export function tmpfsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root';
  const probe = mkdtempSync(join(tmpdir(), 'nsfwd-tmpfs-probe-'));
  try {
    const r = mount(['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]);
    if (!r.ok) return `mount -t tmpfs refused: ${r.error}`;
    spawnSync('umount', [probe]);
    return undefined;
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
}

/** A tmpfs of `bytes` at a fresh directory under TMPDIR (nsfwd-tmpfs-*). */
export function mountTmpfs(bytes: number): Tmpfs {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwd-tmpfs-'));
  const r = mount(['-t', 'tmpfs', '-o', `size=${bytes},mode=0700`, 'tmpfs', dir]);
  if (!r.ok) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`mount -t tmpfs at ${dir}: ${r.error}`);
  }
  const filler = join(dir, 'filler');
  let mounted = true;
  const remount = (mode: 'ro' | 'rw') => {
    const m = mount(['-o', `remount,${mode}`, dir]);
    if (!m.ok) throw new Error(`mount -o remount,${mode} ${dir}: ${m.error}`);
  };
  return {
    dir,
    fill() {
      const fd = openSync(filler, 'a');
      const chunk = Buffer.alloc(4096, 0x55);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      } finally {
        closeSync(fd);
      }
      return filler;
    },
    free() {
      unlinkSync(filler);
    },
    readOnly: () => remount('ro'),
    readWrite: () => remount('rw'),
    unmount() {
      if (mounted) {
        const u = spawnSync('umount', [dir], { encoding: 'utf8' });
        if (u.status !== 0) throw new Error(`umount ${dir}: ${u.stderr}`);
        mounted = false;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
