// `npm run bench -- --only fairness`: what a 1 MP image waits for beside the costliest traffic, on the
// real server (embedded, default configuration, clients told apart by
// X-Forwarded-For with TRUSTED_PROXY_HOPS=1):
//   mix     8 loops of the largest allowed images (200 MP JPEG, 36 MP 16-bit PNG, 48 MP progressive JPEG,
//           ~49 MB noise PNG), each from its own address, beside one loop of 1 MP probes;
//   attack  two loops of the 883-scan 14142² grey progressive JPEG from ONE address, beside legitimate
//           1 MP traffic (4 loops, other addresses): the probes' p50/p99, their 503s, what the attack
//           got, and the peak memory of the server with its decoder processes (their PSS summed: a
//           shared page counted once), sampled every 50 ms;
//   attack  the same with the 3300² colour variant (2,647 scans, ~8 s of CPU for 617 KiB).
// A header-probe limit on scans would refuse the attack before any decoding; without one, what is
// measured here is the decoders' isolation and the CPU limit alone.

import { readFileSync } from 'node:fs';
import { loadAllInOneConfig } from '../services/all-in-one/config.ts';
import { hostileImage, manyScanScript, writeProgressiveJpeg } from '../test/support/hostile-images.ts';
import { startServer } from '../test/support/server-process.ts';
import { percentile } from './http-load.ts';
import { benchImages } from './images.ts';
import { texture, treeMemory } from './memory.ts';

const MiB = 1024 * 1024;
/** The chart's detect memory limit (values.yaml, detect.resources.limits), which the peak must stay under. */
const CHART_MEMORY_LIMIT_MIB = Number(
  /\ndetect:\n[\s\S]*?limits: \{[^}]*memory: (\d+)Mi/.exec(
    readFileSync(new URL('../charts/nsfwdetector/values.yaml', import.meta.url), 'utf8'),
  )?.[1],
);

interface Answer {
  status: number;
  code: number;
  ms: number;
}

async function post(url: string, body: Buffer, type: string, address: string): Promise<Answer> {
  const started = performance.now();
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': type, 'x-forwarded-for': address },
      body: new Uint8Array(body),
    });
    const { code } = (await res.json()) as { code: number };
    return { status: res.status, code, ms: performance.now() - started };
  } catch {
    return { status: 0, code: -1, ms: performance.now() - started };
  }
}

/** Loops `send` until `until`, collecting the answers. */
async function loop(until: () => boolean, send: () => Promise<Answer>): Promise<Answer[]> {
  const answers: Answer[] = [];
  while (!until()) answers.push(await send());
  return answers;
}

function latency(answers: Answer[]): string {
  const ok = answers
    .filter((a) => a.status === 200)
    .map((a) => a.ms)
    .sort((a, b) => a - b);
  const unavailable = answers.filter((a) => a.status === 503).length;
  const other = answers.length - ok.length - unavailable;
  return `p50 ${(percentile(ok, 50) / 1000).toFixed(2)} s, p99 ${(percentile(ok, 99) / 1000).toFixed(2)} s (${ok.length} × 200, ${unavailable} × 503, ${other} other)`;
}

function tally(answers: Answer[]): string {
  const counts = new Map<string, number>();
  for (const a of answers)
    counts.set(`${a.status}/${a.code}`, (counts.get(`${a.status}/${a.code}`) ?? 0) + 1);
  return [...counts].map(([k, n]) => `${n}× ${k}`).join(', ');
}

export async function fairnessSection(seconds: number): Promise<Array<[string, string]>> {
  const config = loadAllInOneConfig(process.env);
  const lines: Array<[string, string]> = [];
  const probes = (await benchImages()).map((i) => i.jpeg);
  const largest = await Promise.all([
    texture(20000, 10000, 3).jpeg({ quality: 70 }).toBuffer(),
    texture(8000, 6000, 3).jpeg({ quality: 80, progressive: true }).toBuffer(),
    texture(6000, 6000, 4).png({ compressionLevel: 9 }).toColourspace('rgb16').toBuffer(),
    texture(4096, 4000, 3).png({ compressionLevel: 1 }).toBuffer(),
  ]);
  const types = ['image/jpeg', 'image/jpeg', 'image/png', 'image/png'];
  const attack = writeProgressiveJpeg({
    width: 14142,
    height: 14142,
    components: 1,
    scans: manyScanScript(1),
  });
  const colour = await hostileImage('jpeg-many-scans-colour-3300');
  const server = await startServer({
    ANON_PER_MINUTE: '1000000',
    ANON_PER_DAY: '1000000',
    TRUSTED_PROXY_HOPS: '1',
    LOG_LEVEL: 'warn',
  });
  try {
    const url = `${server.url}/api/public/detect`;
    const pid = server.proc.pid as number;
    for (const probe of probes) await post(url, probe, 'image/jpeg', '10.9.0.1');
    let peak = treeMemory(pid);
    const rest = peak;
    const sampler = setInterval(() => {
      peak = Math.max(peak, treeMemory(pid));
    }, 50);
    let n = 0;
    const probe = (address: string) => () =>
      post(url, probes[n++ % probes.length] as Buffer, 'image/jpeg', address);

    // Phase 1: the largest allowed images, 8 at a time, each loop from its own address.
    let end = performance.now() + seconds * 1000;
    const over = () => performance.now() > end;
    const [probeAnswers, ...mix] = await Promise.all([
      loop(over, probe('10.1.0.1')),
      ...Array.from({ length: 8 }, (_, i) =>
        loop(over, () => post(url, largest[i % 4] as Buffer, types[i % 4] as string, `10.2.0.${i + 1}`)),
      ),
    ]);
    lines.push(
      ['fairness: 1 MP probe beside 8 loops of the largest images', latency(probeAnswers ?? [])],
      ['  the largest images', tally(mix.flat())],
      [
        '  peak memory, server + decoders (PSS)',
        `${Math.round(peak / MiB)} MiB (at rest ${Math.round(rest / MiB)} MiB)`,
      ],
    );

    // Phase 2: two loops of the many-scan JPEG from one address, beside legitimate traffic.
    peak = treeMemory(pid);
    end = performance.now() + seconds * 2 * 1000;
    const [attacks, ...legit] = await Promise.all([
      Promise.all([
        loop(over, () => post(url, attack, 'image/jpeg', '10.6.6.6')),
        loop(over, () => post(url, attack, 'image/jpeg', '10.6.6.6')),
      ]).then((a) => a.flat()),
      ...Array.from({ length: 4 }, (_, i) => loop(over, probe(`10.3.0.${i + 1}`))),
    ]);
    lines.push(
      [
        'attack: legitimate 1 MP traffic (4 loops) beside 2 loops of the 883-scan JPEG',
        latency(legit.flat()),
      ],
      ['  the attack (one address)', `${tally(attacks)} (${(attack.length / 1024).toFixed(0)} KiB each)`],
      [
        '  peak memory, server + decoders (PSS)',
        `${Math.round(peak / MiB)} MiB  (chart limit ${CHART_MEMORY_LIMIT_MIB} MiB; decode budget ${Math.round(config.concurrency.decodeBytes / MiB)} MiB)`,
      ],
    );

    // Phase 3: the small variant (3300² colour, 2,647 scans: ~8 s of CPU each), killed at the CPU an
    // ordinary image of its size needs.
    peak = treeMemory(pid);
    end = performance.now() + seconds * 1000;
    const [smallAttacks, ...legitBeside] = await Promise.all([
      Promise.all([1, 2].map(() => loop(over, () => post(url, colour, 'image/jpeg', '10.7.7.7')))).then((a) =>
        a.flat(),
      ),
      ...Array.from({ length: 4 }, (_, i) => loop(over, probe(`10.4.0.${i + 1}`))),
    ]);
    clearInterval(sampler);
    lines.push(
      [
        'attack: legitimate 1 MP traffic (4 loops) beside 2 loops of the 3300² 2,647-scan JPEG',
        latency(legitBeside.flat()),
      ],
      [
        '  the attack (one address)',
        `${tally(smallAttacks)} (${(colour.length / 1024).toFixed(0)} KiB each)`,
      ],
      ['  peak memory, server + decoders (PSS)', `${Math.round(peak / MiB)} MiB`],
      ['  server alive at the end', String(server.proc.exitCode === null)],
    );
    return lines;
  } finally {
    await server.stop();
  }
}
