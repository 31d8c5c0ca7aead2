// `npm run bench -- --only memory`: the server's peak memory (with its decoder processes) under a mix of the largest images each format
// allows, eight at a time, against what its memory budget promises: the process at rest (after warm-up)
// plus MAX_UPLOAD_BYTES_IN_PROGRESS (uploads held) plus DECODE_MEMORY_BUDGET_BYTES (decoding).

import { readdirSync, readFileSync } from 'node:fs';
import sharp from 'sharp';
import { loadAllInOneConfig } from '../services/all-in-one/config.ts';
import { decodeMemoryBytes } from '../services/detect/image/decode-memory.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { startServer } from '../test/support/server-process.ts';
import { largePng, noise } from './images.ts';

const MiB = 1024 * 1024;

/**
 * The memory of `pid` and every process below it (the decoder processes), in bytes: the sum of their
 * PSS, where a page shared by several processes (node, libvips) counts once in all — what the
 * container's memory limit sees, unlike a sum of RSS.
 */
export function treeMemory(pid: number): number {
  let total = 0;
  const visit = (p: number) => {
    try {
      total +=
        Number(/^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'))?.[1] ?? 0) * 1024;
      for (const task of readdirSync(`/proc/${p}/task`)) {
        const children = readFileSync(`/proc/${p}/task/${task}/children`, 'utf8').trim();
        for (const child of children ? children.split(' ') : []) visit(Number(child));
      }
    } catch {
      // The process ended while being read.
    }
  };
  visit(pid);
  return total;
}

/**
 * A smooth gradient with faint noise, in tiles: files of the largest dimensions stay under the 50 MiB
 * upload limit, while decoders still do all their work (their memory depends on the size, not the content).
 */
export function texture(width: number, height: number, channels: 3 | 4) {
  const tile = 256;
  const grain = noise(tile * tile * channels, 0x2545f491);
  const pixels = Buffer.alloc(grain.length);
  for (let i = 0; i < pixels.length; i++) {
    const x = Math.floor(i / channels) % tile;
    const y = Math.floor(i / channels / tile);
    pixels[i] = (x + y) / 2 + ((grain[i] ?? 0) & 0x07);
  }
  return sharp({
    create: { width, height, channels, background: { r: 120, g: 100, b: 80, alpha: 1 } },
    limitInputPixels: false,
  }).composite([{ input: pixels, raw: { width: tile, height: tile, channels }, tile: true }]);
}

interface MixImage {
  name: string;
  type: string;
  body: Buffer;
}

/** The largest each format allows (spec part 8, and 50 MiB), as the server would meet them. */
async function largestImages(): Promise<MixImage[]> {
  const make = async (name: string, type: string, image: Promise<Buffer>) => ({
    name,
    type,
    body: await image,
  });
  return Promise.all([
    make(
      'JPEG 20000x10000 baseline (200 MP)',
      'image/jpeg',
      texture(20000, 10000, 3).jpeg({ quality: 70 }).toBuffer(),
    ),
    make(
      'JPEG 8000x6000 progressive 4:2:0',
      'image/jpeg',
      texture(8000, 6000, 3).jpeg({ quality: 80, progressive: true }).toBuffer(),
    ),
    make(
      'JPEG 14000x14000 progressive 4:4:4',
      'image/jpeg',
      texture(14000, 14000, 3)
        .jpeg({ quality: 50, progressive: true, chromaSubsampling: '4:4:4' })
        .toBuffer(),
    ),
    make('PNG 4096x4000 RGB noise (~49 MB)', 'image/png', largePng()),
    make(
      'PNG 6000x6000 RGBA 16-bit',
      'image/png',
      texture(6000, 6000, 4).png({ compressionLevel: 9 }).toColourspace('rgb16').toBuffer(),
    ),
    make('WebP 8192x4394', 'image/webp', texture(8192, 4394, 3).webp({ quality: 70 }).toBuffer()),
    make('GIF 8192x4394', 'image/gif', texture(8192, 4394, 3).gif().toBuffer()),
    make('TIFF 6000x6000 RGBA', 'image/tiff', texture(6000, 6000, 4).tiff({ compression: 'lzw' }).toBuffer()),
  ]);
}

export async function memorySection(seconds: number): Promise<Array<[string, string]>> {
  const config = loadAllInOneConfig(process.env);
  const images = await largestImages();
  const lines: Array<[string, string]> = [];
  for (const image of images) {
    const probed = probeHeader(image.body, await sniffFormat(image.body), config.limits);
    lines.push([
      `  ${image.name}`,
      `${(image.body.length / MiB).toFixed(1)} MiB file, decode estimate ${Math.round(decodeMemoryBytes(image.body, probed) / MiB)} MiB`,
    ]);
  }
  const server = await startServer({
    ANON_PER_MINUTE: '1000000',
    ANON_PER_DAY: '1000000',
    LOG_LEVEL: 'warn',
  });
  try {
    const pid = server.proc.pid as number;
    const url = `${server.url}/api/public/detect`;
    // The server with its decoder processes: decoding happens in those.
    const baseline = treeMemory(pid);
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, treeMemory(pid));
    }, 20);
    // Answers by image and code, so that a refusal is seen for what it is.
    const answers = new Map<string, Map<number, number>>();
    const deadline = performance.now() + seconds * 1000;
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (performance.now() < deadline) {
          const image = images[next++ % images.length] as MixImage;
          const res = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': image.type },
            body: new Uint8Array(image.body),
          });
          const { code } = (await res.json()) as { code: number };
          const byCode = answers.get(image.name) ?? new Map<number, number>();
          byCode.set(code, (byCode.get(code) ?? 0) + 1);
          answers.set(image.name, byCode);
        }
      }),
    );
    clearInterval(sampler);
    const { uploadBytes, decodeBytes } = config.concurrency;
    const promise = baseline + uploadBytes + decodeBytes;
    lines.unshift([
      'memory: largest images of each format, concurrency 8',
      `peak memory ${Math.round(peak / MiB)} MiB (PSS of server + decoders, sampled every 20 ms); at rest ${Math.round(baseline / MiB)} MiB + uploads ${Math.round(uploadBytes / MiB)} MiB + decode budget ${Math.round(decodeBytes / MiB)} MiB = ${Math.round(promise / MiB)} MiB  (target: peak ≤ that)`,
    ]);
    for (const [i, [name, figure]] of lines.entries()) {
      const byCode = answers.get(name.trim());
      if (i >= 1 && byCode)
        lines[i] = [name, `${figure}; answered ${[...byCode].map(([c, n]) => `${n}× code ${c}`).join(', ')}`];
    }
    return lines;
  } finally {
    await server.stop();
  }
}
