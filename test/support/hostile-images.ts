// Images whose cost is out of proportion to their size, all valid to the letter, made on the spot and
// named in one map (HOSTILE_IMAGES): what the header probe must count, the decode-memory estimate must
// bound, and the fast path must decline or decode exactly.
//
// - Many-scan progressive JPEGs: one coefficient per scan, first at point transform 13, then every
//   successive-approximation refinement down to 0 (1 + 63 × 14 = 883 scans grey, 1 + 3 × 882 = 2,647
//   colour). libjpeg walks every block of a component once per scan, so the cost is blocks × scans.
//   jpegtran cannot write them (its scan scripts stop at 100 scans, its encoder at a point transform of
//   10), so writeProgressiveJpeg below writes them itself: all AC coefficients zero (each AC scan is a
//   handful of end-of-band runs), the DC a cheap pattern.
// - The largest allowed progressive 4:4:4 JPEG (14000 × 14000 = 196 MP) by the same writer, with a
//   normal scan script: its coefficient buffer (~1.2 GB) is what decoding it costs, whatever its ~1 MB.
// - Metadata-heavy files: a PNG with a 31 MB tEXt chunk (and zTXt, iTXt, iCCP, eXIf variants), JPEGs with
//   ~49.8 MB of APPn or COM segments.
// - Frame-heavy files: a GIF of 3,000,000 one-pixel frames, an animated WebP of 20,000 frames, a TIFF
//   of 65,535 pages (each decoder walks every frame or directory, even for the first alone).
// - Progressive JPEGs whose scans leave coefficients incomplete (DC only, AC without its last refinement,
//   ...), made from a real baseline JPEG by `jpegtran -scans` (Debian libjpeg-turbo-progs): libjpeg-turbo
//   smooths such blocks (block smoothing), differently in each build.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32, deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { prng } from './prng.ts';

// ------------------------------------------------------------------------------- a progressive writer

/** One scan of a progressive script: components (indices), spectral band Ss..Se, Ah, Al. */
export interface ScanSpec {
  components: number[];
  ss: number;
  se: number;
  ah: number;
  al: number;
}

export interface ProgressiveJpegSpec {
  width: number;
  height: number;
  /** 1 (greyscale), 3 (YCbCr) or any other count (up to 255), every component sampled 1×1 (4:4:4). */
  components: number;
  scans: ScanSpec[];
  /** The DC coefficient (quantised, -127..127) of block (bx, by) of component c. Default: 0 (flat grey). */
  dc?: (c: number, bx: number, by: number) => number;
}

/** Entropy-coded bits with JPEG byte stuffing (an 0xFF byte is followed by 0x00). */
class BitWriter {
  private readonly chunks: Buffer[] = [];
  private buf = Buffer.alloc(1 << 16);
  private at = 0;
  private acc = 0;
  private n = 0;

  write(value: number, bits: number): void {
    for (let i = bits - 1; i >= 0; i--) {
      this.acc = (this.acc << 1) | ((value >>> i) & 1);
      if (++this.n === 8) this.flushByte();
    }
  }

  private flushByte(): void {
    if (this.at + 2 > this.buf.length) {
      this.chunks.push(this.buf.subarray(0, this.at));
      this.buf = Buffer.alloc(1 << 16);
      this.at = 0;
    }
    this.buf[this.at++] = this.acc;
    if (this.acc === 0xff) this.buf[this.at++] = 0;
    this.acc = 0;
    this.n = 0;
  }

  /** Pads the last byte with 1 bits, as the standard says. */
  finish(): Buffer {
    while (this.n !== 0) this.write(1, 1);
    this.chunks.push(this.buf.subarray(0, this.at));
    return Buffer.concat(this.chunks);
  }
}

/** A canonical Huffman table from (symbol, code length) pairs, in code order; never an all-ones code. */
interface Huffman {
  lengths: Array<[number, number]>;
  code: Map<number, [number, number]>;
}

function huffman(lengths: Array<[number, number]>): Huffman {
  const code = new Map<number, [number, number]>();
  let next = 0;
  let length = 1;
  for (const [symbol, l] of [...lengths].sort((a, b) => a[1] - b[1])) {
    next <<= l - length;
    length = l;
    code.set(symbol, [next++, l]);
  }
  return { lengths, code };
}

function put(bits: BitWriter, table: Huffman, symbol: number): void {
  const [code, length] = table.code.get(symbol) as [number, number];
  bits.write(code, length);
}

function segment(marker: number, payload: Buffer): Buffer {
  const head = Buffer.from([0xff, marker, 0, 0]);
  head.writeUInt16BE(payload.length + 2, 2);
  return Buffer.concat([head, payload]);
}

function dht(tableClass: 0 | 1, table: Huffman): Buffer {
  const counts = Buffer.alloc(16);
  const symbols = [...table.lengths].sort((a, b) => a[1] - b[1]);
  for (const [, l] of symbols) counts[l - 1] = (counts[l - 1] as number) + 1;
  return segment(
    0xc4,
    Buffer.concat([Buffer.from([tableClass << 4]), counts, Buffer.from(symbols.map(([s]) => s))]),
  );
}

/** DC difference categories: 0 (the flat case) in one bit, 1..8 in five. */
const DC_TABLE = huffman([[0, 1], ...Array.from({ length: 8 }, (_, i): [number, number] => [i + 1, 5])]);
/** End-of-band runs EOB0..EOB14, four bits each. */
const EOB_TABLE = huffman(Array.from({ length: 15 }, (_, r): [number, number] => [r << 4, 4]));

/** Every block of a band already zero: end-of-band runs of up to 32,767 blocks (EOB14 + 14 bits). */
function writeEobRuns(bits: BitWriter, blocks: number): void {
  let left = blocks;
  while (left > 0) {
    const r = Math.min(14, Math.floor(Math.log2(Math.min(left, 32767))));
    const run = Math.min(left, 2 ** (r + 1) - 1);
    put(bits, EOB_TABLE, r << 4);
    if (r > 0) bits.write(run - 2 ** r, r);
    left -= run;
  }
}

/** A progressive (SOF2, Huffman) JPEG with the given scans; AC coefficients all zero, DC from `dc`. */
export function writeProgressiveJpeg(spec: ProgressiveJpegSpec): Buffer {
  const { width, height, components, scans } = spec;
  const dc = spec.dc ?? (() => 0);
  const wBlocks = Math.ceil(width / 8);
  const hBlocks = Math.ceil(height / 8);
  const parts: Buffer[] = [Buffer.from([0xff, 0xd8])];
  parts.push(segment(0xe0, Buffer.from([0x4a, 0x46, 0x49, 0x46, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0])));
  parts.push(segment(0xdb, Buffer.concat([Buffer.from([0]), Buffer.alloc(64, 8)])));
  const sof = Buffer.alloc(6 + 3 * components);
  sof[0] = 8;
  sof.writeUInt16BE(height, 1);
  sof.writeUInt16BE(width, 3);
  sof[5] = components;
  for (let c = 0; c < components; c++) sof.set([c + 1, 0x11, 0], 6 + 3 * c);
  parts.push(segment(0xc2, sof));
  for (const scan of scans) {
    const isDc = scan.ss === 0;
    const refine = scan.ah !== 0;
    if (!(isDc && refine)) parts.push(dht(isDc ? 0 : 1, isDc ? DC_TABLE : EOB_TABLE));
    const sos = Buffer.alloc(1 + 2 * scan.components.length + 3);
    sos[0] = scan.components.length;
    for (const [i, c] of scan.components.entries()) sos.set([c + 1, 0x00], 1 + 2 * i);
    sos.set([scan.ss, scan.se, (scan.ah << 4) | scan.al], 1 + 2 * scan.components.length);
    parts.push(segment(0xda, sos));
    const bits = new BitWriter();
    if (isDc) {
      const predictions = new Array<number>(components).fill(0);
      for (let by = 0; by < hBlocks; by++)
        for (let bx = 0; bx < wBlocks; bx++)
          for (const c of scan.components) {
            const value = dc(c, bx, by);
            if (refine) {
              bits.write((value >> scan.al) & 1, 1);
              continue;
            }
            const shifted = value >> scan.al;
            const diff = shifted - (predictions[c] as number);
            predictions[c] = shifted;
            const category = diff === 0 ? 0 : Math.floor(Math.log2(Math.abs(diff))) + 1;
            put(bits, DC_TABLE, category);
            if (category > 0) bits.write(diff > 0 ? diff : diff + (1 << category) - 1, category);
          }
    } else {
      writeEobRuns(bits, wBlocks * hBlocks);
    }
    parts.push(bits.finish());
  }
  parts.push(Buffer.from([0xff, 0xd9]));
  return Buffer.concat(parts);
}

/** DC of every component first, then each AC coefficient alone: first at Al 13, then every refinement. */
export function manyScanScript(components: number): ScanSpec[] {
  const all = Array.from({ length: components }, (_, c) => c);
  const scans: ScanSpec[] = [{ components: all, ss: 0, se: 0, ah: 0, al: 0 }];
  for (const c of all)
    for (let k = 1; k < 64; k++) {
      scans.push({ components: [c], ss: k, se: k, ah: 0, al: 13 });
      for (let al = 13; al > 0; al--) scans.push({ components: [c], ss: k, se: k, ah: al, al: al - 1 });
    }
  return scans;
}

/** libjpeg's simple progression (jpeg_simple_progression): 10 scans colour, 6 grey. */
export function simpleScript(components: 1 | 3): ScanSpec[] {
  const scan = (c: number[], ss: number, se: number, ah: number, al: number): ScanSpec => ({
    components: c,
    ss,
    se,
    ah,
    al,
  });
  if (components === 1)
    return [
      scan([0], 0, 0, 0, 1),
      scan([0], 1, 5, 0, 2),
      scan([0], 6, 63, 0, 2),
      scan([0], 1, 63, 2, 1),
      scan([0], 0, 0, 1, 0),
      scan([0], 1, 63, 1, 0),
    ];
  return [
    scan([0, 1, 2], 0, 0, 0, 1),
    scan([0], 1, 5, 0, 2),
    scan([2], 1, 63, 0, 1),
    scan([1], 1, 63, 0, 1),
    scan([0], 6, 63, 0, 2),
    scan([0], 1, 63, 2, 1),
    scan([0, 1, 2], 0, 0, 1, 0),
    scan([2], 1, 63, 1, 0),
    scan([1], 1, 63, 1, 0),
    scan([0], 1, 63, 1, 0),
  ];
}

/** A slow diagonal pattern with some texture, so a decoded image is not flat. */
const patternDc = (c: number, bx: number, by: number): number =>
  (((bx * 3 + by * 5 + c * 40) % 200) - 100 + ((bx ^ by) & 7)) | 0;

// -------------------------------------------------------------------------------------- metadata files

export function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

/** A small RGB PNG (noise) with `ancillary` chunks between IHDR and IDAT. */
export function pngWithChunks(width: number, height: number, ancillary: Buffer[]): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const random = prng(7);
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width * 3; x++) raw[y * (width * 3 + 1) + 1 + x] = Math.floor(random() * 256);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    ...ancillary,
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

const text = (bytes: number): Buffer => Buffer.alloc(bytes, 'lorem ipsum dolor sit amet ');

/** Incompressible bytes (a zlib stream of them is as large as they are). */
function noise(bytes: number, seed: number): Buffer {
  const random = prng(seed);
  const out = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i += 4) {
    const v = Math.floor(random() * 2 ** 32);
    for (let k = 0; k < 4 && i + k < bytes; k++) out[i + k] = (v >>> (8 * k)) & 0xff;
  }
  return out;
}

const MB = 1_000_000;

/** A baseline 4:2:0 JPEG of `width` × `height` noise and gradients. */
async function baselineJpeg(width: number, height: number, components: 1 | 3 = 3): Promise<Buffer> {
  const random = prng(width * 31 + height);
  const raw = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      for (let k = 0; k < 3; k++)
        raw[(y * width + x) * 3 + k] = (x * (k + 1) + y * (3 - k) + Math.floor(random() * 48)) & 0xff;
  let image = sharp(raw, { raw: { width, height, channels: 3 } });
  if (components === 1) image = image.greyscale();
  return image.jpeg({ quality: 85, chromaSubsampling: '4:2:0' }).toBuffer();
}

/** `jpeg` with `segments` copies of a marker segment (`marker`, payload of `bytes`) after SOI. */
function withSegments(jpeg: Buffer, marker: number, prefix: Buffer, segments: number): Buffer {
  const payload = Buffer.concat([prefix, noise(65533 - prefix.length, marker)]);
  const one = segment(marker, payload);
  return Buffer.concat([jpeg.subarray(0, 2), ...Array<Buffer>(segments).fill(one), jpeg.subarray(2)]);
}

/** 760 segments of 65,537 bytes: 49.8 MB of metadata, under the 50 MB file limit with the image. */
const APPN_SEGMENTS = 760;

/**
 * Small files of the hostile shapes, for the fuzzers' seed corpora (each under 256 KB): the many-scan
 * progressions (883 and 2,647 scans), and a JPEG and a PNG carrying every kind of metadata segment or
 * chunk. Synchronous: no encoder but the writer above.
 */
export function hostileSeeds(): Array<{ name: string; bytes: Buffer; format: 'jpeg' | 'png' }> {
  const grey = writeProgressiveJpeg({
    width: 64,
    height: 64,
    components: 1,
    scans: manyScanScript(1),
    dc: patternDc,
  });
  const colour = writeProgressiveJpeg({
    width: 48,
    height: 48,
    components: 3,
    scans: manyScanScript(3),
    dc: patternDc,
  });
  const small = writeProgressiveJpeg({
    width: 64,
    height: 48,
    components: 3,
    scans: simpleScript(3),
    dc: patternDc,
  });
  const segments: Buffer[] = [];
  for (const [marker, prefix] of [
    [0xe1, 'Exif\0\0MM\0*\0\0\0\x08'],
    [0xe1, 'http://ns.adobe.com/xap/1.0/\0'],
    [0xe2, 'ICC_PROFILE\0\x01\x01'],
    [0xed, 'Photoshop 3.0\0'],
    [0xfe, ''],
  ] as const)
    for (let i = 0; i < 3; i++)
      segments.push(segment(marker, Buffer.concat([Buffer.from(prefix, 'latin1'), noise(4000, marker + i)])));
  const metadataJpeg = Buffer.concat([small.subarray(0, 2), ...segments, small.subarray(2)]);
  const metadataPng = pngWithChunks(16, 16, [
    pngChunk('tEXt', Buffer.concat([Buffer.from('Comment\0'), text(20_000)])),
    pngChunk('zTXt', Buffer.concat([Buffer.from('Comment\0\0'), deflateSync(text(200_000))])),
    pngChunk('iTXt', Buffer.concat([Buffer.from('Comment\0\0\0en\0\0'), text(20_000)])),
    pngChunk('iCCP', Buffer.concat([Buffer.from('icc\0\0'), deflateSync(noise(5000, 1))])),
    pngChunk('eXIf', Buffer.concat([Buffer.from('MM\0*\0\0\0\x08'), noise(5000, 2)])),
  ]);
  return [
    { name: 'many-scans-grey.jpg', bytes: grey, format: 'jpeg' },
    { name: 'many-scans-colour.jpg', bytes: colour, format: 'jpeg' },
    { name: 'metadata.jpg', bytes: metadataJpeg, format: 'jpeg' },
    { name: 'metadata.png', bytes: metadataPng, format: 'png' },
  ];
}

// ------------------------------------------------------------------------ incomplete progressive files

/** Scan scripts (jpegtran -scans syntax) that leave some coefficients without all their bits. */
export const INCOMPLETE_SCRIPTS: Record<string, string> = {
  'dc-only': '0,1,2: 0 0 0 0;',
  'dc-al1-unrefined': '0,1,2: 0 0 0 1; 0: 1 63 0 0; 1: 1 63 0 0; 2: 1 63 0 0;',
  'ac-al1-unrefined': '0,1,2: 0 0 0 0; 0: 1 63 0 1; 1: 1 63 0 1; 2: 1 63 0 1;',
  'luma-low-band-only': '0,1,2: 0 0 0 0; 0: 1 5 0 0; 1: 1 63 0 0; 2: 1 63 0 0;',
  'chroma-ac-missing': '0,1,2: 0 0 0 0; 0: 1 63 0 0;',
  'simple-without-last-refinement':
    '0,1,2: 0 0 0 1; 0: 1 5 0 2; 2: 1 63 0 1; 1: 1 63 0 1; 0: 6 63 0 2; 0: 1 63 2 1; 0,1,2: 0 0 1 0;',
};

/** A grey script for each colour one: component 0 only. */
function greyScript(script: string): string {
  return script
    .split(';')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      const [comps, band] = s.split(':') as [string, string];
      return comps.split(',').includes('0') ? `0:${band};` : '';
    })
    .join(' ');
}

/** `jpegtran -scans` on `jpeg` (throws with jpegtran's words when it is missing or refuses). */
export function jpegtranScans(jpeg: Buffer, script: string): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'hostile-'));
  try {
    writeFileSync(join(dir, 'in.jpg'), jpeg);
    writeFileSync(join(dir, 'scans.txt'), `${script}\n`);
    execFileSync('jpegtran', [
      '-scans',
      join(dir, 'scans.txt'),
      '-outfile',
      join(dir, 'out.jpg'),
      join(dir, 'in.jpg'),
    ]);
    return readFileSync(join(dir, 'out.jpg'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Progressive files with incomplete coefficients, one per script, colour and grey, of a 333 × 250 photo-like image. */
export async function incompleteProgressiveJpegs(
  width = 333,
  height = 250,
): Promise<Array<{ name: string; bytes: Buffer }>> {
  const colour = await baselineJpeg(width, height, 3);
  const grey = await baselineJpeg(width, height, 1);
  const out: Array<{ name: string; bytes: Buffer }> = [];
  for (const [name, script] of Object.entries(INCOMPLETE_SCRIPTS)) {
    out.push({ name: `colour-${name}`, bytes: jpegtranScans(colour, script) });
    const g = greyScript(script);
    if (g.includes('1 ') || g.includes('0 0 0 0') || g.includes('0 0 0 1'))
      out.push({ name: `grey-${name}`, bytes: jpegtranScans(grey, g) });
  }
  return out;
}

/** A little-endian TIFF of `pages` one-pixel grey pages, each directory pointing to the next. */
export function tiffPages(pages: number): Buffer {
  const ifd = 2 + 8 * 12 + 4;
  const buf = Buffer.alloc(8 + pages * (ifd + 2));
  buf.write('II', 0, 'latin1');
  buf.writeUInt16LE(42, 2);
  buf.writeUInt32LE(8, 4);
  for (let i = 0; i < pages; i++) {
    const at = 8 + i * (ifd + 2);
    const pixel = at + ifd;
    // width, height, bits, compression none, min-is-black, strip offset, rows per strip, strip bytes
    const tags: Array<[number, number, number]> = [
      [256, 3, 1],
      [257, 3, 1],
      [258, 3, 8],
      [259, 3, 1],
      [262, 3, 1],
      [273, 4, pixel],
      [278, 3, 1],
      [279, 4, 1],
    ];
    buf.writeUInt16LE(tags.length, at);
    for (const [k, [tag, type, value]] of tags.entries()) {
      const e = at + 2 + k * 12;
      buf.writeUInt16LE(tag, e);
      buf.writeUInt16LE(type, e + 2);
      buf.writeUInt32LE(1, e + 4);
      if (type === 3) buf.writeUInt16LE(value, e + 8);
      else buf.writeUInt32LE(value, e + 8);
    }
    buf.writeUInt32LE(i + 1 < pages ? at + ifd + 2 : 0, at + 2 + tags.length * 12);
    buf[pixel] = 128;
  }
  return buf;
}

/** An animated WebP of `frames` one-pixel lossless frames on a 63² canvas. */
async function animatedWebp(frames: number): Promise<Buffer> {
  const one = await sharp({ create: { width: 1, height: 1, channels: 4, background: '#fff' } })
    .webp({ lossless: true })
    .toBuffer();
  const chunk = (fourcc: string, data: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(fourcc, 0, 'latin1');
    head.writeUInt32LE(data.length, 4);
    return Buffer.concat([head, data, Buffer.alloc(data.length & 1)]);
  };
  const vp8x = Buffer.alloc(10);
  vp8x[0] = 0x12; // animation, alpha
  vp8x.writeUIntLE(62, 4, 3);
  vp8x.writeUIntLE(62, 7, 3);
  const frameHeader = Buffer.alloc(16);
  frameHeader.writeUIntLE(100, 12, 3); // 100 ms
  const anmf = chunk('ANMF', Buffer.concat([frameHeader, one.subarray(12)]));
  const body = Buffer.concat([
    Buffer.from('WEBP'),
    chunk('VP8X', vp8x),
    chunk('ANIM', Buffer.alloc(6)),
    ...Array<Buffer>(frames).fill(anmf),
  ]);
  const size = Buffer.alloc(4);
  size.writeUInt32LE(body.length, 0);
  return Buffer.concat([Buffer.from('RIFF'), size, body]);
}

// ------------------------------------------------------------------------------------------- the map

export interface HostileImage {
  /** What it is and what it costs. */
  about: string;
  make: () => Promise<Buffer>;
}

export const HOSTILE_IMAGES = {
  'jpeg-noise-16mp': {
    about:
      '4000² progressive 4:4:4 JPEG of Gaussian noise (q90): a valid image whose decode takes several times a tight DECODE_CPU_LIMIT_MS of 100 ms (a baseline one took ~160 ms: too near a limit polled every 100 ms)',
    make: () =>
      sharp({
        create: {
          width: 4000,
          height: 4000,
          channels: 3,
          background: '#808080',
          noise: { type: 'gaussian', mean: 128, sigma: 40 },
        },
      })
        .jpeg({ quality: 90, progressive: true, chromaSubsampling: '4:4:4' })
        .toBuffer(),
  },
  'jpeg-many-scans-grey-14142': {
    about: '14142² grey progressive JPEG, 883 scans (one coefficient each, then every refinement)',
    make: async () =>
      writeProgressiveJpeg({ width: 14142, height: 14142, components: 1, scans: manyScanScript(1) }),
  },
  'jpeg-many-scans-colour-3300': {
    about: '3300² colour 4:4:4 progressive JPEG, 2,647 scans',
    make: async () =>
      writeProgressiveJpeg({
        width: 3300,
        height: 3300,
        components: 3,
        scans: manyScanScript(3),
        dc: patternDc,
      }),
  },
  'jpeg-many-scans-grey-64': {
    about: '64² grey progressive JPEG, 883 scans: cheap to decode, a seed for the fuzzers',
    make: async () =>
      writeProgressiveJpeg({ width: 64, height: 64, components: 1, scans: manyScanScript(1), dc: patternDc }),
  },
  'jpeg-many-scans-colour-48': {
    about: '48² colour progressive JPEG, 2,647 scans: cheap to decode, a seed for the fuzzers',
    make: async () =>
      writeProgressiveJpeg({ width: 48, height: 48, components: 3, scans: manyScanScript(3), dc: patternDc }),
  },
  'jpeg-progressive-444-196mp': {
    about: '14000² colour 4:4:4 progressive JPEG (10 scans): ~1.2 GB of coefficients for ~1 MB of file',
    make: async () =>
      writeProgressiveJpeg({
        width: 14000,
        height: 14000,
        components: 3,
        scans: simpleScript(3),
        dc: patternDc,
      }),
  },
  'jpeg-progressive-grey-30000x6666': {
    about: '30000 × 6666 grey progressive JPEG (6 scans): the longest allowed edge, ~200 MP',
    make: async () =>
      writeProgressiveJpeg({
        width: 30000,
        height: 6666,
        components: 1,
        scans: simpleScript(1),
        dc: patternDc,
      }),
  },
  'jpeg-scan-blocks-at-limit-grey': {
    about:
      '14142² grey progressive JPEG whose 25 scans walk 78 M blocks: the most MAX_JPEG_SCAN_BLOCKS allows',
    make: async () =>
      writeProgressiveJpeg({
        width: 14142,
        height: 14142,
        components: 1,
        scans: manyScanScript(1).slice(0, 25),
      }),
  },
  'jpeg-scan-blocks-131m-grey': {
    about:
      '14142² grey progressive JPEG, 42 scans walking 131 M blocks (406 KB): the most the former bound of 2^27 allowed, ~5.7 s of CPU on an Intel Xeon',
    make: async () =>
      writeProgressiveJpeg({
        width: 14142,
        height: 14142,
        components: 1,
        scans: manyScanScript(1).slice(0, 42),
      }),
  },
  'jpeg-scan-blocks-strip-30000x4472': {
    about:
      '30000 × 4472 grey progressive JPEG, 64 scans walking 134 M blocks (279 KB): a strip at the former bound of 2^27',
    make: async () =>
      writeProgressiveJpeg({
        width: 30000,
        height: 4472,
        components: 1,
        scans: manyScanScript(1).slice(0, 64),
      }),
  },
  'png-4m-empty-chunks': {
    about:
      '64² PNG with 4,300,000 empty ancillary chunks before its image data (51 MB): a walk of 0.4–0.6 s, nothing a decoder keeps',
    make: async () => {
      const one = pngChunk('zzZz', Buffer.alloc(0));
      return pngWithChunks(64, 64, Array<Buffer>(4_300_000).fill(one));
    },
  },
  'jpeg-12m-com-segments': {
    about: '640 × 480 JPEG with 12,800,000 empty COM segments after SOI (51 MB): a walk of ~0.5 s',
    make: async () => {
      const base = await baselineJpeg(640, 480);
      const one = Buffer.from([0xff, 0xfe, 0x00, 0x02]);
      return Buffer.concat([base.subarray(0, 2), ...Array<Buffer>(12_800_000).fill(one), base.subarray(2)]);
    },
  },
  'gif-3m-frames': {
    about: '64² GIF of 3,000,000 one-pixel frames (45 MB): libnsgif keeps a record of every frame',
    make: async () => {
      const screen = Buffer.from([
        0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 64, 0, 64, 0, 0x80, 0, 0, 0, 0, 0, 255, 255, 255,
      ]);
      const frame = Buffer.from([0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0x02, 0x02, 0x44, 0x01, 0x00]);
      return Buffer.concat([screen, ...Array<Buffer>(3_000_000).fill(frame), Buffer.from([0x3b])]);
    },
  },
  'webp-20000-frames': {
    about:
      "63² animated WebP of 20,000 one-pixel frames (1 MB): libvips's loader costs the square of the frame count",
    make: async () => animatedWebp(20_000),
  },
  'tiff-65535-pages': {
    about: 'TIFF of 65,535 one-pixel pages (6.8 MB): the most pages allowed; libtiff reads every directory',
    make: async () => tiffPages(65_535),
  },
  'png-text-31mb': {
    about: '64² PNG with a 31 MB tEXt chunk',
    make: async () =>
      pngWithChunks(64, 64, [pngChunk('tEXt', Buffer.concat([Buffer.from('Comment\0'), text(31 * MB)]))]),
  },
  'png-ztxt-31mb': {
    about: '64² PNG with a 31 MB zTXt chunk (incompressible text, so 31 MB once inflated too)',
    make: async () =>
      pngWithChunks(64, 64, [
        pngChunk(
          'zTXt',
          Buffer.concat([Buffer.from('Comment\0\0'), deflateSync(noise(31 * MB, 3), { level: 0 })]),
        ),
      ]),
  },
  'png-ztxt-bomb': {
    about: '64² PNG with a zTXt chunk of ~1 MB that inflates to 256 MB of spaces',
    make: async () =>
      pngWithChunks(64, 64, [
        pngChunk(
          'zTXt',
          Buffer.concat([
            Buffer.from('Comment\0\0'),
            deflateSync(Buffer.alloc(256 * MB, 0x20), { level: 1 }),
          ]),
        ),
      ]),
  },
  'png-itxt-31mb': {
    about: '64² PNG with a 31 MB uncompressed iTXt chunk',
    make: async () =>
      pngWithChunks(64, 64, [
        pngChunk('iTXt', Buffer.concat([Buffer.from('Comment\0\0\0en\0\0'), text(31 * MB)])),
      ]),
  },
  'png-many-text-chunks': {
    about: '64² PNG with 30,000 tEXt chunks of 1 KB (31 MB in all)',
    make: async () => {
      const one = pngChunk('tEXt', Buffer.concat([Buffer.from('Comment\0'), text(1024)]));
      return pngWithChunks(64, 64, Array<Buffer>(30_000).fill(one));
    },
  },
  'png-iccp-31mb': {
    about: '64² PNG with a 31 MB (compressed, incompressible) iCCP chunk: not a valid profile',
    make: async () =>
      pngWithChunks(64, 64, [
        pngChunk(
          'iCCP',
          Buffer.concat([Buffer.from('icc\0\0'), deflateSync(noise(31 * MB, 5), { level: 0 })]),
        ),
      ]),
  },
  'png-exif-31mb': {
    about: '64² PNG with a 31 MB eXIf chunk',
    make: async () =>
      pngWithChunks(64, 64, [
        pngChunk('eXIf', Buffer.concat([Buffer.from('MM\0*\0\0\0\x08'), noise(31 * MB, 9)])),
      ]),
  },
  'jpeg-app1-exif-50mb': {
    about: '640 × 480 JPEG with 760 APP1 "Exif" segments (49.8 MB)',
    make: async () =>
      withSegments(await baselineJpeg(640, 480), 0xe1, Buffer.from('Exif\0\0MM\0*\0\0\0\x08'), APPN_SEGMENTS),
  },
  'jpeg-app1-xmp-50mb': {
    about: '640 × 480 JPEG with 760 APP1 XMP segments (49.8 MB)',
    make: async () =>
      withSegments(
        await baselineJpeg(640, 480),
        0xe1,
        Buffer.from('http://ns.adobe.com/xap/1.0/\0'),
        APPN_SEGMENTS,
      ),
  },
  'jpeg-app2-icc-50mb': {
    about: '640 × 480 JPEG with 760 APP2 ICC_PROFILE segments (49.8 MB): not a valid profile',
    make: async () => {
      const base = await baselineJpeg(640, 480);
      const parts: Buffer[] = [base.subarray(0, 2)];
      for (let i = 0; i < 255; i++) {
        const head = Buffer.concat([Buffer.from('ICC_PROFILE\0'), Buffer.from([i + 1, 255])]);
        parts.push(segment(0xe2, Buffer.concat([head, noise(65533 - head.length, i)])));
      }
      const rest = withSegments(base, 0xed, Buffer.from('Photoshop 3.0\0'), APPN_SEGMENTS - 255);
      return Buffer.concat([...parts, rest.subarray(2)]);
    },
  },
  'jpeg-app13-50mb': {
    about: '640 × 480 JPEG with 760 APP13 (IPTC) segments (49.8 MB)',
    make: async () =>
      withSegments(await baselineJpeg(640, 480), 0xed, Buffer.from('Photoshop 3.0\0'), APPN_SEGMENTS),
  },
  'jpeg-com-50mb': {
    about: '640 × 480 JPEG with 760 COM segments (49.8 MB)',
    make: async () => withSegments(await baselineJpeg(640, 480), 0xfe, Buffer.alloc(0), APPN_SEGMENTS),
  },
  'jpeg-incomplete-dc-only': {
    about: '333 × 250 progressive JPEG with its DC scan only (jpegtran -scans)',
    make: async () => jpegtranScans(await baselineJpeg(333, 250), INCOMPLETE_SCRIPTS['dc-only'] as string),
  },
  'jpeg-incomplete-ac-unrefined': {
    about: '333 × 250 progressive JPEG whose AC scans stop at point transform 1 (jpegtran -scans)',
    make: async () =>
      jpegtranScans(await baselineJpeg(333, 250), INCOMPLETE_SCRIPTS['ac-al1-unrefined'] as string),
  },
} satisfies Record<string, HostileImage>;

export type HostileImageName = keyof typeof HOSTILE_IMAGES;

const made = new Map<HostileImageName, Promise<Buffer>>();

/** The named image, made once per process. */
export function hostileImage(name: HostileImageName): Promise<Buffer> {
  let image = made.get(name);
  if (!image) {
    image = HOSTILE_IMAGES[name].make();
    made.set(name, image);
  }
  return image;
}
