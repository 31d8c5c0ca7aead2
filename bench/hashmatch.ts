// The bench's `hashmatch` section: finding every listed PDQ hash within distance 31 of a query among
// 10,000, 1,000,000 and 10,000,000 (lib/hash-lists/pdq-index.ts, multi-index hashing over 16- or 21–22-bit chunks)
// beside a linear scan and beside threatexchange 1.2.17's own index (faiss, in its venv), on the same
// hashes and queries in the same run; the index's memory; loading 1,000,000 from a list file into the
// store and into force; PDQ's own cost (each filter, and on the JPEG fast path); and a detect request's
// median answer time and the server's memory with PDQ off, on without lists and on with 1,000,000 listed
// hashes. Random hashes, each query a listed hash with 0-31 bits flipped
// (a match to find) or a random one (none), half and half.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HashListStore } from '../lib/hash-lists/hash-list-store.ts';
import { parseHashList } from '../lib/hash-lists/list-file.ts';
import { PDQ_BYTES, PDQ_WORDS, pdqHex, popcount32, wordsOf } from '../lib/hash-lists/pdq-hex.ts';
import { PdqIndex } from '../lib/hash-lists/pdq-index.ts';
import { HashListSet } from '../services/detect/hash-lists.ts';
import { jpegToTensor, libjpegUnavailable } from '../services/detect/image/libjpeg/jpeg-tensor.ts';
import { PDQ_FILTER, PDQ_REDUCE_SIDE, pdqOfDownsample, pdqOfFrame } from '../services/detect/image/pdq.ts';
import { prng } from '../test/support/prng.ts';
import { startServer } from '../test/support/server-process.ts';
import { TOOLS_DIR } from '../tools/stack/tools.ts';
import { closeLoadConnections, postOnce } from './http-load.ts';
import { type BenchImage, benchImages } from './images.ts';
import { treeMemory } from './memory.ts';

/** BENCH_HASHMATCH_SIZES (comma-separated) to measure fewer. */
const SIZES = (process.env.BENCH_HASHMATCH_SIZES ?? '10000,1000000,10000000').split(',').map(Number);
const QUERIES = 2_000;
const DISTANCE = 31;
/** Seconds each matcher gets per size (the linear scan at 10M answers a few queries in it). */
const BUDGET_S = 5;
/** threatexchange's index builds ~100 s a million hashes on the busy bench box: a bound for quick runs. */
const REFERENCE_UP_TO = Number(process.env.BENCH_HASHMATCH_REFERENCE_UP_TO ?? Number.POSITIVE_INFINITY);
/** BENCH_HASHMATCH_REQUESTS: sequential detect requests a p50 is taken of (default 60). */
const REQUESTS = Number(process.env.BENCH_HASHMATCH_REQUESTS ?? 60);
/** BENCH_HASHMATCH_INDEX_ONLY=1: the index figures only (no loading, no servers). */
const INDEX_ONLY = process.env.BENCH_HASHMATCH_INDEX_ONLY === '1';
const REFERENCE_PYTHON = path.join(TOOLS_DIR, 'pdq-0.2.8-threatexchange-1.2.17', 'bin', 'python');
const REFERENCE_SCRIPT = path.join(import.meta.dirname, 'hashmatch-reference.py');

function randomHashes(n: number, random: () => number): Uint8Array {
  const out = new Uint8Array(n * PDQ_BYTES);
  const view = new Uint32Array(out.buffer);
  for (let i = 0; i < view.length; i++) view[i] = Math.floor(random() * 0x1_0000_0000);
  return out;
}

function queriesFor(hashes: Uint8Array, random: () => number): Uint32Array[] {
  const n = hashes.length / PDQ_BYTES;
  return Array.from({ length: QUERIES }, (_, i) => {
    if (i % 2) return wordsOf(randomHashes(1, random), 0);
    const q = hashes.slice(Math.floor(random() * n) * PDQ_BYTES).subarray(0, PDQ_BYTES);
    for (let f = Math.floor(random() * 32); f > 0; f--) {
      const b = Math.floor(random() * 256);
      q[b >> 3] = (q[b >> 3] as number) ^ (1 << (b & 7));
    }
    return wordsOf(q, 0);
  });
}

function linearNearest(words: Uint32Array, q: Uint32Array): number {
  let found = 0;
  for (let w = 0; w < words.length; w += PDQ_WORDS) {
    let d = 0;
    for (let k = 0; k < PDQ_WORDS && d <= DISTANCE; k++) {
      d += popcount32(((words[w + k] as number) ^ (q[k] as number)) >>> 0);
    }
    if (d <= DISTANCE) found++;
  }
  return found;
}

/** Queries a second of wall time, and of this process's CPU time (the honest figure on a shared box). */
function rate(
  queries: Uint32Array[],
  each: (q: Uint32Array) => number,
): { qps: number; cpuQps: number; found: number } {
  let found = 0;
  let done = 0;
  const started = performance.now();
  const cpu = process.cpuUsage();
  while (done < queries.length && performance.now() - started < BUDGET_S * 1000) {
    found += each(queries[done] as Uint32Array);
    done++;
  }
  const used = process.cpuUsage(cpu);
  return {
    qps: done / ((performance.now() - started) / 1000),
    cpuQps: done / ((used.user + used.system) / 1e6),
    found,
  };
}

const fmt = (x: number) => (x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(1));
const mib = (b: number) => `${(b / 1048576).toFixed(0)} MiB`;

/** Prints each figure as soon as it is measured (the 10M figures take minutes on a busy machine). */
export async function hashMatchSection(): Promise<void> {
  const lines = { push: (line: string) => console.log(line) };
  const random = prng(31);
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-hashmatch-'));
  try {
    for (const n of SIZES) {
      const hashes = randomHashes(n, random);
      const queries = queriesFor(hashes, random);
      let started = performance.now();
      const index = new PdqIndex(hashes);
      const buildS = (performance.now() - started) / 1000;
      const mih = rate(queries, (q) => index.within(q, DISTANCE).length);
      const words = new Uint32Array(n * PDQ_WORDS);
      for (let i = 0; i < n; i++) wordsOf(hashes, i * PDQ_BYTES, words, i * PDQ_WORDS);
      const scan = rate(queries, (q) => linearNearest(words, q));
      lines.push(
        `hashmatch ${n.toLocaleString('en-US')} hashes: multi-index ${fmt(mih.qps)} queries/s, ${fmt(mih.cpuQps)} a CPU second (${(1000 / mih.cpuQps).toFixed(3)} ms of CPU each; built in ${buildS.toFixed(2)} s; ${(index.bytes / n).toFixed(1)} bytes a hash)` +
          ` | linear scan ${fmt(scan.qps)} queries/s, ${fmt(scan.cpuQps)} a CPU second`,
      );
      let ref = 'threatexchange venv missing (bash .ci/install-tools.sh)';
      if (n > REFERENCE_UP_TO) {
        lines.push(
          `hashmatch ${n.toLocaleString('en-US')} hashes: threatexchange not run (BENCH_HASHMATCH_REFERENCE_UP_TO)`,
        );
        continue;
      }
      try {
        started = performance.now();
        const hashFile = path.join(dir, 'hashes.txt');
        const queryFile = path.join(dir, 'queries.txt');
        const hex: string[] = [];
        for (let i = 0; i < n; i++) hex.push(pdqHex(hashes, i * PDQ_BYTES));
        writeFileSync(hashFile, hex.join('\n'));
        const qHex = queries.map((q) => {
          const b = new Uint8Array(PDQ_BYTES);
          for (let w = 0; w < PDQ_WORDS; w++) {
            const v = q[w] as number;
            b.set([v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255], w * 4);
          }
          return pdqHex(b);
        });
        writeFileSync(queryFile, qHex.join('\n'));
        const out = JSON.parse(
          execFileSync(REFERENCE_PYTHON, [REFERENCE_SCRIPT, hashFile, queryFile, String(BUDGET_S)], {
            encoding: 'utf8',
            maxBuffer: 1 << 20,
          }),
        ) as {
          build_s: number;
          qps: number;
          cpu_qps: number;
          queries: number;
          found: number;
          rss_growth: number;
        };
        // Found per query answered: both find every match within 31 (a check, not a figure).
        const ours = mih.found / Math.min(queries.length, Math.round(mih.qps * BUDGET_S));
        ref = `threatexchange PDQIndex (faiss) ${fmt(out.qps)} queries/s, ${fmt(out.cpu_qps)} a CPU second (built in ${out.build_s.toFixed(1)} s; RSS +${mib(out.rss_growth)}; ${(out.found / out.queries).toFixed(2)} matches a query vs ours ${ours.toFixed(2)})`;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
          ref = `threatexchange failed: ${(err as Error).message.split('\n')[0]}`;
      }
      lines.push(`hashmatch ${n.toLocaleString('en-US')} hashes: ${ref}`);
    }

    if (INDEX_ONLY) return;
    // Loading 1,000,000 hashes: file → store (the admin import) → in force (the detect reload).
    const million = randomHashes(1_000_000, random);
    const listFile = path.join(dir, 'million.txt');
    const text: string[] = ['# bench list'];
    for (let i = 0; i < 1_000_000; i++) text.push(pdqHex(million, i * PDQ_BYTES));
    writeFileSync(listFile, text.join('\n'));
    const storeFile = path.join(dir, 'hash-lists.db');
    let started = performance.now();
    const parsed = parseHashList(text.join('\n'));
    const store = new HashListStore(storeFile);
    store.put('bench', 'block', DISTANCE, parsed);
    const importS = (performance.now() - started) / 1000;
    started = performance.now();
    const { lists, generation } = store.loadAll();
    HashListSet.build(lists, generation);
    const loadS = (performance.now() - started) / 1000;
    store.close();
    lines.push(
      `hashmatch loading 1,000,000: import (parse + store) ${importS.toFixed(2)} s, into force (read + index) ${loadS.toFixed(2)} s`,
    );

    // The hash itself: CPU time on a decoded 1 MP frame, each filter (median of 21, after a warm-up);
    // and what it adds to a JPEG on the fast path, whose decoder feeds the filter as it decodes.
    const [image] = await benchImages();
    const { rgb, width, height, jpeg } = image as BenchImage;
    // This thread's CPU only: the process's would count the collector's helpers still busy with the
    // million-hash index above (a 2 ms filter measured 15 ms so).
    const cpuMs = (work: () => void): number => {
      const cpu: number[] = [];
      for (let i = 0; i < 26; i++) {
        const t = process.threadCpuUsage();
        work();
        const used = process.threadCpuUsage(t);
        if (i >= 5) cpu.push((used.user + used.system) / 1000);
      }
      return cpu.sort((a, b) => a - b)[10] as number;
    };
    const filters = (PDQ_FILTER === 'native' ? (['native', 'js'] as const) : (['js'] as const)).map(
      (filter) => `${filter} filter ${cpuMs(() => pdqOfFrame(rgb, width, height, filter)).toFixed(1)} ms`,
    );
    lines.push(
      `hashmatch PDQ of a ${width}×${height} frame (CPU, median of 21): ${filters.join(', ')}${PDQ_FILTER === 'native' ? '' : ' (the addon is not built)'}`,
    );
    if (!libjpegUnavailable()) {
      const fast = (pdq: boolean) =>
        cpuMs(() => {
          const input = jpegToTensor(jpeg, 224, 1e9, pdq ? PDQ_REDUCE_SIDE : undefined);
          if (typeof input === 'string') throw new Error(`the fast path declined the bench JPEG: ${input}`);
          if (pdq && input.pdq) pdqOfDownsample(input.pdq, input.width, input.height);
        });
      const [without, withPdq] = [fast(false), fast(true)];
      lines.push(
        `hashmatch the JPEG fast path on it (decode + model input, CPU, median of 21): ${without.toFixed(1)} ms, with PDQ ${withPdq.toFixed(1)} ms (+${(withPdq - without).toFixed(1)} ms)`,
      );
    }

    // A detect request without PDQ, with it and no list, with it and 1,000,000 listed hashes: median
    // answer, server memory.
    for (const run of ['PDQ off', 'without lists', 'with 1,000,000 listed hashes'] as const) {
      const listed = run === 'with 1,000,000 listed hashes';
      const server = await startServer({
        ANON_PER_MINUTE: '1000000',
        ANON_PER_DAY: '1000000',
        LOG_LEVEL: 'warn',
        PDQ_HASHES: run === 'PDQ off' ? 'off' : 'on',
        HASH_LISTS_FILE: listed ? storeFile : path.join(dir, 'none.db'),
      });
      try {
        const url = `${server.url}/api/public/detect`;
        for (let i = 0; i < 5; i++) await postOnce(url, jpeg, 'image/jpeg');
        const ms: number[] = [];
        for (let i = 0; i < REQUESTS; i++) ms.push((await postOnce(url, jpeg, 'image/jpeg')).ms);
        ms.sort((a, b) => a - b);
        lines.push(
          `hashmatch detect p50 ${run}: ${(ms[Math.floor(REQUESTS / 2)] as number).toFixed(1)} ms (1 MP JPEG, ${REQUESTS} sequential requests); server memory ${mib(treeMemory(server.proc.pid as number))}`,
        );
      } finally {
        closeLoadConnections();
        await server.stop();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
