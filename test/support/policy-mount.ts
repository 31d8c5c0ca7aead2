// A policy file mounted the way the kubelet mounts a ConfigMap volume: each version in a new
// timestamped directory, the `..data` symlink swapped to it by an atomic rename, and policy.json a
// symlink through `..data`. The services watch such a file (lib/policy/policy-watch.ts).

import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PolicyDocument } from '../../lib/policy/policy-file.ts';

export interface PolicyMount {
  /** The path to give the service as POLICY_FILE. */
  file: string;
  /** Publishes a new version of the file (any text: an invalid one too). */
  write(text: string): void;
  remove(): void;
}

export function policyMount(first: string): PolicyMount {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-policy-mount-'));
  let n = 0;
  const write = (text: string) => {
    const stamp = `..2026_11_23_${String(n++).padStart(4, '0')}`;
    mkdirSync(join(dir, stamp));
    writeFileSync(join(dir, stamp, 'policy.json'), text);
    symlinkSync(stamp, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  };
  write(first);
  symlinkSync('..data/policy.json', join(dir, 'policy.json'));
  return {
    file: join(dir, 'policy.json'),
    write,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

type Overrides = { generation: number } & Omit<PolicyDocument, 'source' | 'tiers'> & {
    tiers?: PolicyDocument['tiers'];
  };

/** A valid policy file's text (as the operator renders it), with generous limits where not given. */
export function policyText(o: Overrides): string {
  const doc: PolicyDocument = {
    source: { name: 'main', generation: o.generation },
    thresholds: o.thresholds ?? { allow: 0.2, block: 0.8 },
    model: o.model ?? 'mobilenet_v2',
    anonymous: o.anonymous ?? { perMinute: 100_000, perDay: 1_000_000 },
    tiers: {
      free: o.tiers?.free ?? { perMinute: 100_000, perDay: 1_000_000 },
      pro: o.tiers?.pro ?? { perMinute: 100_000, perDay: 1_000_000 },
    },
    upload: o.upload ?? { maxBytes: 52_428_800 },
    ...(o.maxFramesScored !== undefined && { maxFramesScored: o.maxFramesScored }),
  };
  return JSON.stringify(doc);
}

/** True once the service logged that it applied the policy of this generation. */
export function applied(logLines: () => Array<Record<string, unknown>>, generation: number): boolean {
  return logLines().some(
    (l) => l.msg === 'policy applied' && (l.source as { generation?: number })?.generation === generation,
  );
}
