// The release check's architecture parity: every corpus file that should score (test/fixtures/corpus.ts)
// posted to two servers of the release running the same model, the amd64 image's (the reference) and the
// arm64 image's (under QEMU); the two answers' scores and the model's own class scores must agree within
// 1e-4. Prints the largest difference of each; exits 1 on any difference over the bound, or an answer
// one server gave and the other did not. One exception, printed by name: a file the candidate refuses
// for its decode's CPU time (4005, DECODE_CPU_LIMIT_MS's per-size allowance): under QEMU every decode
// costs many times its native CPU time, so the costliest small files (CMYK, Photoshop TIFF) overrun an
// allowance sized for native CPUs, which says nothing of arm64. `--models` prints the models to check,
// one run each: every offered one (tools/release/check.sh).
// usage: tsx tools/release/arch-parity.ts REFERENCE_URL CANDIDATE_URL MODEL | --models

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { OFFERED_MODEL_NAMES } from '../../lib/common/model-catalogue.ts';
import { CORPUS, fixture } from '../../test/fixtures/corpus.ts';

export const BOUND = 1e-4;
interface Answer {
  code?: number;
  message?: string;
  data?: { scores: Record<string, number>; classes: Record<string, number | Record<string, number>> };
}

/** What a server answers for a decode over its CPU-time allowance (decoder-pool.ts). */
const CPU_TIME_REFUSAL = /^Undecodable image: decoding it took over .* of CPU time/;

async function detect(url: string, name: string, bytes: Buffer): Promise<Answer | 'cpu-time'> {
  const body = new FormData();
  body.append('file', new Blob([new Uint8Array(bytes)]), name);
  const res = await fetch(`${url}/api/public/detect`, { method: 'POST', body });
  const answer = (await res.json()) as Answer;
  if (answer.code === 4005 && CPU_TIME_REFUSAL.test(answer.message ?? '')) return 'cpu-time';
  if (!res.ok || !answer.data)
    throw new Error(`${url}: ${name}: HTTP ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

/** Every number of an answer by where it is: `scores.nsfw`, `classes.porn` (an ensemble's
 * `classes.<member>.<class>`). */
function numbers(answer: Answer): Map<string, number> {
  const out = new Map<string, number>();
  const walk = (prefix: string, value: unknown) => {
    if (typeof value === 'number') out.set(prefix, value);
    else if (value && typeof value === 'object')
      for (const [k, v] of Object.entries(value)) walk(`${prefix}.${k}`, v);
  };
  walk('scores', answer.data?.scores);
  walk('classes', answer.data?.classes);
  if (out.size === 0) throw new Error(`an answer without scores: ${JSON.stringify(answer)}`);
  return out;
}

export async function compare(reference: string, candidate: string, model: string): Promise<boolean> {
  const names = Object.entries(CORPUS)
    .filter(([, expected]) => 'ok' in expected)
    .map(([name]) => name);
  const worst = new Map<string, { diff: number; where: string }>();
  const overCpuTime: string[] = [];
  let ms = 0;
  for (const name of names) {
    const bytes = readFileSync(fixture(name));
    const expected = await detect(reference, name, bytes);
    if (expected === 'cpu-time') throw new Error(`${reference}: ${name}: refused for its decode's CPU time`);
    const a = numbers(expected);
    const t = performance.now();
    const got = await detect(candidate, name, bytes);
    ms += performance.now() - t;
    if (got === 'cpu-time') {
      overCpuTime.push(name);
      continue;
    }
    const b = numbers(got);
    if ([...a.keys()].sort().join() !== [...b.keys()].sort().join())
      throw new Error(`${name}: the answers differ in shape: ${[...a.keys()]} / ${[...b.keys()]}`);
    for (const [where, x] of a) {
      const diff = Math.abs(x - (b.get(where) ?? Number.NaN));
      const group = where.split('.')[0] ?? where;
      if (!(diff <= (worst.get(group)?.diff ?? -1))) worst.set(group, { diff, where: `${name} ${where}` });
    }
  }
  let ok = true;
  for (const [group, { diff, where }] of worst) {
    const within = diff <= BOUND;
    ok &&= within;
    console.log(
      `arch-parity: ${model} ${group}: ${names.length - overCpuTime.length} corpus files, largest |difference| ${diff.toExponential(2)} (${where}): ${within ? 'within' : 'OVER'} ${BOUND}`,
    );
  }
  if (overCpuTime.length)
    console.log(
      `arch-parity: ${model}: not compared, refused under emulation for their decode's CPU time (4005): ${overCpuTime.join(', ')}`,
    );
  console.log(
    `arch-parity: ${model}: the candidate answered the ${names.length} files in ${(ms / 1000).toFixed(1)} s`,
  );
  return ok;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [reference, candidate, model] = process.argv.slice(2);
  if (reference === '--models') console.log(OFFERED_MODEL_NAMES.join('\n'));
  else if (!reference || !candidate || !model)
    throw new Error('usage: arch-parity.ts REFERENCE_URL CANDIDATE_URL MODEL | --models');
  else if (!(await compare(reference, candidate, model))) process.exit(1);
}
