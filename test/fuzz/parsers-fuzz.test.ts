// The TS image parsers (sniff, probe, the BMP decoder) under a seeded mutation loop for FUZZ_SECONDS
// (60 in `npm test`), in a child process (parsers-fuzz-child.ts): any exception other than the spec's
// refusals, any call over its 2 s budget (only a hang or a pathological loop: see the child) fails the
// test, and its input is left in test-artifacts/fuzz/parsers/. FUZZ_SEED picks another sequence.

import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { spawnChild } from '../support/children.ts';
import { C_COMPILER, describeWithTool } from '../support/tools.ts';
import {
  artifactsDir,
  FUZZ_SECONDS,
  writeBmpSeeds,
  writeCorpusSeeds,
  writeHostileSeeds,
  writeJpegSeeds,
} from './seeds.ts';

const CHILD = fileURLToPath(new URL('parsers-fuzz-child.ts', import.meta.url));
const SEED = process.env.FUZZ_SEED ?? '1';

describeWithTool(C_COMPILER, 'TS parsers under a mutation fuzzer', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuzz-parsers-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(`sniff, probe and decodeBmp answer or refuse with a spec code, for ${FUZZ_SECONDS} s`, {
    timeout: (FUZZ_SECONDS + 120) * 1000,
  }, async () => {
    const seeds = join(dir, 'seeds');
    const build = join(dir, 'build');
    mkdirSync(seeds, { recursive: true });
    const count =
      writeJpegSeeds(seeds, build) +
      writeCorpusSeeds(seeds) +
      writeBmpSeeds(seeds) +
      writeHostileSeeds(seeds);
    expect(readdirSync(seeds)).toHaveLength(count);
    const artifacts = artifactsDir('parsers');
    const child = spawnChild('parsers fuzzer', process.execPath, [
      '--import',
      'tsx',
      CHILD,
      String(FUZZ_SECONDS),
      SEED,
      seeds,
      artifacts,
    ]);
    const code = await child.exited;
    await child.stop();
    const output = child.output();
    expect(code, `findings (inputs in ${artifacts}):\n${output.slice(-4000)}`).toBe(0);
    const stats = JSON.parse(output.trim().split('\n').at(-1) ?? '{}') as {
      iterations: number;
      outcomes: object;
    };
    console.log(
      `parsers fuzzer: ${stats.iterations} inputs in ${FUZZ_SECONDS} s, seed ${SEED}:`,
      stats.outcomes,
    );
    expect(stats.iterations).toBeGreaterThan(count);
  });
});
