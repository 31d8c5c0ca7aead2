// The policy file as the kubelet updates a ConfigMap volume: a new timestamped directory, then the
// `..data` symlink renamed over atomically; policy.json is a symlink through `..data`.

import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { PolicyWatch } from './policy-watch.ts';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const doc = (allow: number, block: number) =>
  JSON.stringify({
    source: { name: 'main', generation: 1 },
    thresholds: { allow, block },
    model: 'mobilenet_v2',
    anonymous: { perMinute: 1, perDay: 2 },
    tiers: { free: { perMinute: 1, perDay: 2 }, pro: { perMinute: 3, perDay: 4 } },
    upload: { maxBytes: 10 },
  });

function mount() {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-policy-unit-'));
  dirs.push(dir);
  let n = 0;
  const write = (text: string) => {
    const stamp = `..2026_${n++}`;
    mkdirSync(join(dir, stamp));
    writeFileSync(join(dir, stamp, 'policy.json'), text);
    symlinkSync(stamp, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  };
  return { dir, write };
}

const quiet = () => {
  const errors: string[] = [];
  const infos: string[] = [];
  return {
    errors,
    infos,
    log: {
      info: (_o: object, msg: string) => void infos.push(msg),
      error: (_o: object, msg: string) => void errors.push(msg),
    },
  };
};

it('reads the policy through the ..data symlink and follows an atomic swap; an invalid file keeps the last good one', () => {
  const { dir, write } = mount();
  write(doc(0.2, 0.8));
  symlinkSync('..data/policy.json', join(dir, 'policy.json'));
  const { errors, log } = quiet();
  const watch = new PolicyWatch(join(dir, 'policy.json'), log, 60_000);
  try {
    expect(watch.current()?.thresholds).toEqual({ allow: 0.2, block: 0.8 });
    write(doc(0.3, 0.6));
    watch.reload();
    expect(watch.current()?.thresholds).toEqual({ allow: 0.3, block: 0.6 });
    write(doc(0.9, 0.1));
    watch.reload();
    expect(watch.current()?.thresholds).toEqual({ allow: 0.3, block: 0.6 });
    expect(errors).toEqual(['policy file invalid; keeping the last good policy']);
    write('{not json');
    watch.reload();
    expect(watch.current()?.thresholds).toEqual({ allow: 0.3, block: 0.6 });
  } finally {
    watch.close();
  }
});

it('has no policy (the configuration applies) while the file is missing, said once at info; a file lost after a policy is an error', () => {
  const { dir, write } = mount();
  const { errors, infos, log } = quiet();
  const watch = new PolicyWatch(join(dir, 'policy.json'), log, 60_000);
  try {
    expect(watch.current()).toBeUndefined();
    watch.reload();
    expect(infos).toEqual(['no policy file yet; the configuration applies']);
    expect(errors).toEqual([]);
    write(doc(0.2, 0.8));
    symlinkSync('..data/policy.json', join(dir, 'policy.json'));
    watch.reload();
    expect(watch.current()?.thresholds).toEqual({ allow: 0.2, block: 0.8 });
    rmSync(join(dir, 'policy.json'));
    watch.reload();
    expect(watch.current()?.thresholds).toEqual({ allow: 0.2, block: 0.8 });
    expect(errors).toEqual(['policy file unreadable; keeping the last good policy']);
  } finally {
    watch.close();
  }
});
