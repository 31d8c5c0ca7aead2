// The release check's architecture parity: every corpus file that should score (test/fixtures/corpus.ts)
// posted to two servers of the release, the amd64 image's (the reference) and the arm64 image's (under
// QEMU), each running every offered model at once (ENSEMBLE_MODEL: one request scores with each, so the
// emulated server decodes each file once); the two answers' scores, and each model's own class scores,
// must agree within 1e-4. Prints one line per model with the largest difference; exits 1 on any
// difference over the bound, or any answer one server gave and the other did not.
// usage: tsx tools/release/arch-parity.ts REFERENCE_URL CANDIDATE_URL

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ENSEMBLE_JOIN, OFFERED_MODEL_NAMES } from '../../lib/policy/model-catalogue.ts';
import { CORPUS, fixture } from '../../test/fixtures/corpus.ts';

export const BOUND = 1e-4;
/** The MODEL both servers run: every offered model, an ensemble whose answer carries each one's classes. */
export const ENSEMBLE_MODEL = OFFERED_MODEL_NAMES.join(ENSEMBLE_JOIN);

interface Answer {
  data?: { scores: Record<string, number>; classes: Record<string, Record<string, number>> };
  error?: { code: number };
}

async function detect(url: string, name: string, bytes: Buffer): Promise<Answer> {
  const body = new FormData();
  body.append('file', new Blob([new Uint8Array(bytes)]), name);
  const res = await fetch(`${url}/api/public/detect`, { method: 'POST', body });
  const answer = (await res.json()) as Answer;
  if (!res.ok || !answer.data)
    throw new Error(`${url}: ${name}: HTTP ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

/** Every number of an answer by where it is: `scores.nsfw`, `<model>.<class>`. */
function numbers(answer: Answer): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of Object.entries(answer.data?.scores ?? {})) out.set(`scores.${k}`, v);
  for (const [model, classes] of Object.entries(answer.data?.classes ?? {}))
    for (const [k, v] of Object.entries(classes)) out.set(`${model}.${k}`, v);
  return out;
}

export async function compare(reference: string, candidate: string): Promise<boolean> {
  const names = Object.entries(CORPUS)
    .filter(([, expected]) => 'ok' in expected)
    .map(([name]) => name);
  const worst = new Map<string, { diff: number; where: string }>();
  let ms = 0;
  for (const name of names) {
    const bytes = readFileSync(fixture(name));
    const a = numbers(await detect(reference, name, bytes));
    const t = performance.now();
    const b = numbers(await detect(candidate, name, bytes));
    ms += performance.now() - t;
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
      `arch-parity: ${group}: ${names.length} corpus files, largest |difference| ${diff.toExponential(2)} (${where}): ${within ? 'within' : 'OVER'} ${BOUND}`,
    );
  }
  console.log(`arch-parity: the candidate answered ${names.length} files in ${(ms / 1000).toFixed(1)} s`);
  return ok;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [reference, candidate] = process.argv.slice(2);
  if (!reference || !candidate) throw new Error('usage: arch-parity.ts REFERENCE_URL CANDIDATE_URL');
  if (!(await compare(reference, candidate))) process.exit(1);
}
