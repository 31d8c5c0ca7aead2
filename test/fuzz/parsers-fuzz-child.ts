// The TS image parsers fuzzed in-process with a seeded mutation loop (mutate.ts), as the service calls
// them on a request body: sniffFormat and signatureFormat, then probeHeader and checkImageData for the
// format the bytes claim, and the BMP decoder for BMPs. A parser may only answer or throw the spec's
// refusals (ApiError 4002 from sniffing; 4004 or 4005 from the header and the data); anything else, or
// one call over CALL_BUDGET_MS, is a finding: its input is written to the artifacts dir, a FINDING line
// to stderr, and the process exits 1. Run by parsers-fuzz.test.ts (docs/security-testing.md).
//
// argv: <seconds> <seed> <seed dir> <artifacts dir>
//
// The budget is not a timing assertion: a header parse takes microseconds and a BMP decode of the
// fuzzer's largest image milliseconds, so only a hang or a pathological loop comes near 2 s. A call
// that never returns is caught by a watchdog thread, which saves the input and kills the process.

import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { isApiError } from '../../lib/common/errors.ts';
import { decodeBmp } from '../../services/detect/image/bmp.ts';
import { checkImageData, probeHeader } from '../../services/detect/image/probe.ts';
import { signatureFormat, sniffFormat } from '../../services/detect/image/sniff.ts';
import { prng } from '../support/prng.ts';
import { mutate } from './mutate.ts';

const CALL_BUDGET_MS = 2_000;
const MAX_INPUT = 1 << 20;
/** The BMP decoder's pixel bound here (the service's is 36 MP): the same code, less time per input. */
const BMP_MAX_PIXELS = 4_000_000;

const [seconds, seed, seedDir, artifacts] = process.argv.slice(2);
const random = prng(Number(seed));
const seeds = readdirSync(seedDir ?? '')
  .sort()
  .map((name) => new Uint8Array(readFileSync(join(seedDir ?? '', name))));
if (seeds.length === 0) throw new Error(`no seeds in ${seedDir}`);
mkdirSync(artifacts ?? '', { recursive: true });

const TARGETS = ['sniffFormat', 'signatureFormat', 'probeHeader', 'checkImageData', 'decodeBmp'] as const;
type Target = (typeof TARGETS)[number];

/** Which spec codes each target may refuse with. */
const ALLOWED: Record<Target, readonly number[]> = {
  sniffFormat: [4002],
  signatureFormat: [],
  probeHeader: [4004, 4005],
  checkImageData: [4005],
  decodeBmp: [4004, 4005],
};

// Shared with the watchdog: [sequence, in a call (0/1), target, input length], the call's start time,
// and the input itself.
const control = new Int32Array(new SharedArrayBuffer(16));
const started = new Float64Array(new SharedArrayBuffer(8));
const shared = new Uint8Array(new SharedArrayBuffer(MAX_INPUT));

const WATCHDOG = `
const { workerData } = require('node:worker_threads');
const { writeFileSync, writeSync } = require('node:fs');
const { createHash } = require('node:crypto');
const { join } = require('node:path');
const { control, started, shared, budget, artifacts, targets } = workerData;
let seen = -1;
setInterval(() => {
  const sequence = Atomics.load(control, 0);
  if (Atomics.load(control, 1) === 0 || sequence !== seen) { seen = sequence; return; }
  if (Date.now() - started[0] <= budget) return;
  const input = shared.slice(0, control[3]);
  const target = targets[control[2]];
  const file = join(artifacts, 'hang-' + target + '-' + createHash('sha1').update(input).digest('hex') + '.bin');
  writeFileSync(file, input);
  writeSync(2, 'FINDING ' + target + ' did not return within ' + budget + ' ms: ' + file + '\\n');
  process.kill(process.pid, 'SIGKILL');
}, 250);
`;
const watchdog = new Worker(WATCHDOG, {
  eval: true,
  workerData: { control, started, shared, budget: CALL_BUDGET_MS, artifacts, targets: TARGETS },
});
watchdog.unref();

function finding(kind: string, target: Target, input: Uint8Array, detail: string): never {
  const name = `${kind}-${target}-${createHash('sha1').update(input).digest('hex')}`;
  const file = join(artifacts ?? '', `${name}.bin`);
  writeFileSync(file, input);
  writeFileSync(join(artifacts ?? '', `${name}.txt`), `${detail}\n`);
  writeSync(2, `FINDING ${target} ${kind}: ${detail.split('\n')[0]} (input: ${file})\n`);
  process.exit(1);
}

const counts = new Map<string, number>();
const count = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);

async function call<T>(target: Target, input: Uint8Array, fn: () => T | Promise<T>): Promise<T | undefined> {
  control[2] = TARGETS.indexOf(target);
  started[0] = Date.now();
  Atomics.add(control, 0, 1);
  Atomics.store(control, 1, 1);
  const t0 = performance.now();
  try {
    const result = await fn();
    count(`${target} ok`);
    return result;
  } catch (err) {
    if (!isApiError(err) || !ALLOWED[target].includes(err.code))
      finding('exception', target, input, err instanceof Error ? (err.stack ?? err.message) : String(err));
    count(`${target} ${err.code}`);
    return undefined;
  } finally {
    Atomics.store(control, 1, 0);
    const ms = performance.now() - t0;
    if (ms > CALL_BUDGET_MS) finding('slow', target, input, `${Math.round(ms)} ms`);
  }
}

const deadline = Date.now() + Number(seconds) * 1000;
let iterations = 0;
while (Date.now() < deadline) {
  // Each seed as it is first, then mutations of seeds picked at random.
  const input =
    iterations < seeds.length
      ? (seeds[iterations] as Uint8Array)
      : mutate(seeds[Math.floor(random() * seeds.length)] as Uint8Array, random, seeds, MAX_INPUT);
  shared.set(input.subarray(0, MAX_INPUT));
  control[3] = Math.min(input.length, MAX_INPUT);
  const bytes = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  await call('sniffFormat', input, () => sniffFormat(bytes));
  const format = await call('signatureFormat', input, () => signatureFormat(bytes));
  if (format) {
    const probed = await call('probeHeader', input, () => probeHeader(bytes, format));
    if (probed) await call('checkImageData', input, () => checkImageData(bytes, probed));
    if (format === 'bmp') await call('decodeBmp', input, () => decodeBmp(bytes, BMP_MAX_PIXELS));
  }
  iterations++;
}
process.stdout.write(`${JSON.stringify({ iterations, outcomes: Object.fromEntries([...counts].sort()) })}\n`);
