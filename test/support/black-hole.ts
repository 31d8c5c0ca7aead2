// A loopback port black-holed as a lost node's pods are: every packet to or from it is dropped on
// arrival, so that its peers' data is never acknowledged and no RST ever comes. An nftables table of its
// own (one per call, named after this process and the port), deleted by `remove` — call it in `finally`.
// Needs root and nft: `LOOPBACK_BLACK_HOLE` is the tool a test declares with skipWithoutTool.

import { execFileSync } from 'node:child_process';
import { toolPath } from '../../tools/stack/tools.ts';
import type { Tool } from './tools.ts';

function nft(): string | undefined {
  return toolPath('nft');
}

/** nft, usable by this process (root, in a network namespace whose rules it may change). */
export const LOOPBACK_BLACK_HOLE: Tool = {
  name: 'nft as root (a loopback port black-holed)',
  install: 'apt-get install nftables (or: bash .ci/install-k8s-tools.sh), and run the suite as root',
  find: () => {
    const path = nft();
    if (path === undefined || process.getuid?.() !== 0) return undefined;
    try {
      execFileSync(path, ['list', 'tables'], { stdio: 'ignore' });
      return path;
    } catch {
      return undefined;
    }
  },
};

export interface BlackHole {
  /** Deletes the table: the port's packets flow again. Idempotent. */
  remove(): void;
}

export function blackHole(port: number): BlackHole {
  const path = nft();
  if (path === undefined) throw new Error(`nft is not installed: ${LOOPBACK_BLACK_HOLE.install}`);
  const table = `nsfwdetector_black_hole_${process.pid}_${port}`;
  // Dropped on input, not output: the sender's send succeeds and its kernel waits for an ACK, as it
  // would for a peer behind a cut link (a drop on output fails the send at once with EPERM).
  const rules = [
    `table inet ${table} {`,
    '  chain input {',
    '    type filter hook input priority -300; policy accept;',
    `    iifname "lo" tcp dport ${port} drop`,
    `    iifname "lo" tcp sport ${port} drop`,
    '  }',
    '}',
  ].join('\n');
  execFileSync(path, ['-f', '-'], { input: rules });
  let removed = false;
  return {
    remove() {
      if (removed) return;
      execFileSync(path, ['delete', 'table', 'inet', table]);
      removed = true;
    },
  };
}
