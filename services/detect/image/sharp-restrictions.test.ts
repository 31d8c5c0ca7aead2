// sharp's loader list is process-wide: set once, by the main thread, and never by a worker thread (its
// two calls would fail another thread's decode in between); the cache stays off whoever loads sharp.

import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import sharp from 'sharp';
import { expect, it } from 'vitest';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { restrictSharp, restrictSharpLoaders } from './sharp-restrictions.ts';

/** In a new thread: restrictSharpLoaders; resolves with whether that thread set the loader list. */
function restrictedInWorkerThread(): Promise<boolean> {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    import('tsx/esm/api')
      .then(({ tsImport }) => tsImport(workerData.module, workerData.module))
      .then((m) => parentPort.postMessage(m.restrictSharpLoaders()));
  `;
  const worker = new Worker(code, {
    eval: true,
    workerData: { module: new URL('./sharp-restrictions.ts', import.meta.url).href },
  });
  return new Promise((resolve, reject) => {
    worker.once('message', (set: boolean) => {
      resolve(set);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

const JPEG = readFileSync(fixture('320x240.jpg'));
const SVG = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>');

it('only the main thread sets the loader list, once; then the formats decode and other loaders are refused', async () => {
  expect(await restrictedInWorkerThread()).toBe(false);
  // Forks pool: this file has its process to itself, so nothing has restricted sharp yet.
  expect((await sharp(SVG).raw().toBuffer({ resolveWithObject: true })).info.width).toBe(8);
  expect(restrictSharpLoaders()).toBe(true);
  expect(restrictSharpLoaders()).toBe(false);
  expect(await restrictedInWorkerThread()).toBe(false);
  expect((await sharp(JPEG).raw().toBuffer({ resolveWithObject: true })).info.width).toBe(320);
  await expect(sharp(SVG).raw().toBuffer()).rejects.toThrow(/unsupported image format/);
});

it('the operation cache is off before a decode, even after a thread loaded sharp (which turns it on)', async () => {
  restrictSharp();
  expect(sharp.cache().items.max).toBe(0);
  await restrictedInWorkerThread(); // loads sharp in a new thread
  expect(sharp.cache().items.max).toBe(100);
  restrictSharp();
  expect(sharp.cache().items.max).toBe(0);
});
