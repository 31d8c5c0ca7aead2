// A stand-in detect pod (test/support/fake-detect-upstream.mjs) in a child process, for the edge's tests
// with the real Envoy: its port, and what it has read so far (from its output).

import { type Child, spawnChild } from './children.ts';
import { listeningPort, ROOT } from './server-process.ts';

export interface Upstream {
  child: Child;
  port: number;
  /** Bodies it has read to their end. */
  received: () => number;
  /** Whether it has begun reading the body of a request to `url`. */
  reading: (url: string) => boolean;
}

export async function startUpstream(name: string, env: Record<string, string> = {}): Promise<Upstream> {
  const child = spawnChild(
    `fake detect ${name}`,
    process.execPath,
    ['test/support/fake-detect-upstream.mjs'],
    {
      cwd: ROOT,
      env: { ...process.env, FAKE_DETECT_NAME: name, ...env },
    },
  );
  const port = await listeningPort(child, 10_000);
  const received = () =>
    child
      .output()
      .split('\n')
      .filter((l) => l.includes('"received"')).length;
  const reading = (url: string) =>
    child
      .output()
      .split('\n')
      .some((l) => l.includes('"reading"') && l.includes(JSON.stringify(url)));
  return { child, port, received, reading };
}
