// Decodes one image the way a scoring worker does (toModelInput, with the worker's shrink-on-load rule)
// in a process of its own and prints what it cost: the peak resident memory the decode added, measured
// by the kernel, and the CPU time. argv: <image path> <jpeg decoder: libjpeg | sharp>. stdout: one JSON
// line { estimate, peak, cpuMs, decoder, declined? }.
//
// Peak: the resident set just before the decode, then the kernel's high-water mark (VmHWM) after it,
// which /proc/self/clear_refs (5) has reset to the current resident set, so earlier peaks (module
// loading, the warm-up) do not count. Threads (libvips's) share the address space: all of it counts.

import { readFileSync, writeFileSync } from 'node:fs';
import sharp from 'sharp';
import { needsShrinkOnLoad } from '../scoring/image-scorer.ts';
import { toModelInput } from './decode.ts';
import { decodeMemoryBytes } from './decode-memory.ts';
import type { JpegDecoder } from './libjpeg/jpeg-tensor.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

function statusBytes(field: 'VmRSS' | 'VmHWM'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  if (!match) throw new Error(`no ${field} in /proc/self/status`);
  return Number(match[1]) * 1024;
}

const [path, decoder] = process.argv.slice(2) as [string, JpegDecoder];
const bytes = readFileSync(path);
const probed = probeHeader(bytes, await sniffFormat(bytes));
const estimate = decodeMemoryBytes(bytes, probed);

// Warm-up: the loader's library code and libvips's own first allocations are the process's, not the image's.
const warm = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#888' } })
  .toFormat(probed.format === 'bmp' ? 'png' : probed.format)
  .toBuffer();
await toModelInput(
  warm,
  { ...probed, format: probed.format === 'bmp' ? 'png' : probed.format, width: 64, height: 64 },
  224,
  {
    jpegDecoder: decoder,
  },
);

const before = statusBytes('VmRSS');
writeFileSync('/proc/self/clear_refs', '5');
const cpu = process.cpuUsage();
const input = await toModelInput(bytes, probed, 224, {
  jpegDecoder: decoder,
  shrinkOnLoad: needsShrinkOnLoad(probed) ? 'if-declined' : false,
  timeoutSeconds: 0,
});
const used = process.cpuUsage(cpu);
const peak = statusBytes('VmHWM') - before;
process.stdout.write(
  `${JSON.stringify({
    estimate,
    peak,
    cpuMs: Math.round((used.user + used.system) / 1000),
    decoder: input.decoder,
    ...(input.declined === undefined ? {} : { declined: input.declined }),
  })}\n`,
);
