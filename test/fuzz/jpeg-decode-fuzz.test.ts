// The JPEG fast path's native decoder (with PDQ's filter) under libFuzzer with ASan and UBSan (jpeg-decode.fuzz.c) for
// FUZZ_SECONDS (60 in `npm test`), from the JPEG space's files and the corpus's JPEGs: a crash, a
// sanitizer report, a leak, or one input over libFuzzer's per-input timeout (10 s, against milliseconds
// for a real decode: only a hang trips it) fails the test, and libFuzzer leaves the input in
// test-artifacts/fuzz/jpeg-decode/. Built against the system libjpeg, as the addon is.

import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { spawnChild } from '../support/children.ts';
import { C_COMPILER, CLANG, describeWithTool } from '../support/tools.ts';
import {
  artifactsDir,
  FUZZ_SECONDS,
  isJpegName,
  writeCorpusSeeds,
  writeHostileSeeds,
  writeJpegSeeds,
} from './seeds.ts';

const TARGET = fileURLToPath(new URL('jpeg-decode.fuzz.c', import.meta.url));
const NATIVE = '../../services/detect/image/libjpeg/';
const DECODER = fileURLToPath(new URL(`${NATIVE}jpeg-decode.c`, import.meta.url));
const PDQ_FILTER = fileURLToPath(new URL(`${NATIVE}pdq-downsample.c`, import.meta.url));
const PER_INPUT_TIMEOUT_S = 10;

describeWithTool([CLANG, C_COMPILER], 'native JPEG decoder under libFuzzer (ASan, UBSan)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuzz-jpeg-decode-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(`no crash, sanitizer report, leak or hang in ${FUZZ_SECONDS} s`, {
    timeout: (FUZZ_SECONDS + 180) * 1000,
  }, async () => {
    const fuzzer = join(dir, 'jpeg-decode-fuzzer');
    // The addon's flags that change results (-ffp-contract=off), plus the sanitizers; abort on any UB.
    execFileSync(
      'clang',
      [
        '-g',
        '-O1',
        '-std=c11',
        '-D_DEFAULT_SOURCE',
        '-ffp-contract=off',
        '-fsanitize=fuzzer,address,undefined',
        '-fno-sanitize-recover=all',
        '-Wall',
        '-Wextra',
        '-Werror',
        TARGET,
        DECODER,
        PDQ_FILTER,
        '-o',
        fuzzer,
        '-ljpeg',
        '-lm',
      ],
      { stdio: ['ignore', 'inherit', 'pipe'] },
    );
    const seeds = join(dir, 'seeds');
    const corpus = join(dir, 'corpus'); // libFuzzer adds what it finds here, the seeds stay as they are
    mkdirSync(seeds, { recursive: true });
    mkdirSync(corpus, { recursive: true });
    const count =
      writeJpegSeeds(seeds, join(dir, 'build')) +
      writeCorpusSeeds(seeds, isJpegName) +
      writeHostileSeeds(seeds, (format) => format === 'jpeg');
    expect(readdirSync(seeds)).toHaveLength(count);
    const artifacts = artifactsDir('jpeg-decode');
    const child = spawnChild('libFuzzer', fuzzer, [
      `-max_total_time=${FUZZ_SECONDS}`,
      `-timeout=${PER_INPUT_TIMEOUT_S}`,
      '-rss_limit_mb=2048',
      '-max_len=65536', // cheaper runs; larger seeds are cut (their headers, EXIF and ICC included, stay)
      '-print_final_stats=1',
      `-artifact_prefix=${artifacts}/`,
      corpus,
      seeds,
    ]);
    const code = await child.exited;
    await child.stop();
    const output = child.output();
    expect(code, `libFuzzer found something (input in ${artifacts}):\n${output.slice(-6000)}`).toBe(0);
    const runs = /stat::number_of_executed_units:\s*(\d+)/.exec(output)?.[1];
    console.log(`libFuzzer: ${runs} runs in ${FUZZ_SECONDS} s from ${count} seeds`);
    expect(Number(runs)).toBeGreaterThan(count);
  });
});
