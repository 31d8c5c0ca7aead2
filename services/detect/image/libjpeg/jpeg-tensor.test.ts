// The libjpeg fast path changes nothing but the cost: for every JPEG it takes, the model input is
// bit-identical to sharp's decode + resizeToTensor; everything else (CMYK, ICC profiles, EXIF rotation,
// lossless, truncated or corrupt data) is declined with a reason and ends exactly as sharp ends it.

import { readFileSync } from 'node:fs';
import sharp, { type JpegOptions } from 'sharp';
import { describe, expect, it } from 'vitest';
import { isApiError } from '../../../../lib/common/errors.ts';
import { CORPUS, fixture } from '../../../../test/fixtures/corpus.ts';
import { prng } from '../../../../test/support/prng.ts';
import { describeWithTool, JPEG_TENSOR_ADDON } from '../../../../test/support/tools.ts';
import { type ModelInput, toModelInput } from '../decode.ts';
import { probeHeader } from '../probe.ts';
import { jpegToTensor, pdqDownsample } from './jpeg-tensor.ts';

const SIZE = 224;

type Outcome = { input: ModelInput } | { code: number; message: string };

async function outcome(bytes: Buffer, jpegDecoder: 'libjpeg' | 'sharp'): Promise<Outcome> {
  try {
    const probed = probeHeader(bytes, 'jpeg');
    return { input: await toModelInput(bytes, probed, SIZE, { jpegDecoder }) };
  } catch (err) {
    if (!isApiError(err)) throw err;
    return { code: err.code, message: err.message };
  }
}

/** Both decoders on `bytes`: the same error, or bit-identical tensors. Returns the fast path's input. */
async function expectSameOutcome(bytes: Buffer, label: string): Promise<Outcome> {
  const fast = await outcome(bytes, 'libjpeg');
  const slow = await outcome(bytes, 'sharp');
  if ('code' in slow || 'code' in fast) {
    expect(fast, label).toEqual(slow);
    return fast;
  }
  expect(slow.input.decoder, label).toBe('sharp');
  expect([fast.input.decodedWidth, fast.input.decodedHeight], label).toEqual([
    slow.input.decodedWidth,
    slow.input.decodedHeight,
  ]);
  // Buffer.compare: bitwise, and fast to report (a per-element toEqual on 150k floats is slow).
  const a = Buffer.from(fast.input.tensor.buffer, fast.input.tensor.byteOffset, fast.input.tensor.byteLength);
  const b = Buffer.from(slow.input.tensor.buffer, slow.input.tensor.byteOffset, slow.input.tensor.byteLength);
  expect(Buffer.compare(a, b), `${label}: tensors differ`).toBe(0);
  return fast;
}

const decoderOf = (o: Outcome) => ('input' in o ? o.input.decoder : `error ${o.code}`);
const declinedOf = (o: Outcome) => ('input' in o ? o.input.declined : undefined);

const CORPUS_JPEGS = Object.entries(CORPUS)
  .filter(([, expected]) => 'ok' in expected && expected.ok.format === 'jpeg')
  .map(([name]) => name);

async function photo(options: JpegOptions = {}, width = 1155, height = 866): Promise<Buffer> {
  return sharp(readFileSync(fixture('2569067123_aca715a2ee_o.jpg')))
    .resize(width, height, { fit: 'cover' })
    .jpeg({ quality: 85, ...options })
    .toBuffer();
}

describeWithTool(JPEG_TENSOR_ADDON, 'libjpeg fast path', () => {
  it.each(CORPUS_JPEGS)('%s: the same model input as sharp, or declined to sharp', async (name) => {
    const result = await expectSameOutcome(readFileSync(fixture(name)), name);
    expect('input' in result, name).toBe(true);
  });

  it('takes the plain corpus photos and declines, with the reason, what sharp must handle', async () => {
    const decoders = new Map<string, string | undefined>();
    for (const name of CORPUS_JPEGS) {
      const o = await outcome(readFileSync(fixture(name)), 'libjpeg');
      decoders.set(name, decoderOf(o) === 'libjpeg' ? 'libjpeg' : declinedOf(o));
    }
    for (const name of [
      '2569067123_aca715a2ee_o.jpg', // 2725 × 2225 baseline photo
      'flowers.jpeg',
      'Landscape_1.jpg',
      'gamma_dalai_lama_gray.jpg', // greyscale, replicated to RGB as libvips does
      'centered_image.jpeg',
    ])
      expect(decoders.get(name), name).toBe('libjpeg');
    expect(decoders.get('Landscape_2.jpg')).toMatch(/ICC profile/);
    expect(decoders.get('Channel_digital_image_CMYK_color_no_profile.jpg')).toMatch(/not YCbCr/);
    expect(decoders.get('testimgl.jpg')).toMatch(/libjpeg error: Unsupported JPEG process/); // lossless
  });

  it('progressive, 4:4:4 and 4:2:0 encodings, odd and tall sizes (rows skipped): bit-identical', async () => {
    for (const [label, options, w, h] of [
      ['progressive', { progressive: true }, 1155, 866],
      ['4:4:4', { chromaSubsampling: '4:4:4' }, 1155, 866],
      ['4:2:0 odd size', { chromaSubsampling: '4:2:0' }, 1001, 333],
      ['smaller than the model input', {}, 97, 61],
      ['exactly the model input', {}, SIZE, SIZE],
      ['one row', {}, 640, 1],
      ['one column', {}, 1, 480],
      // Tall: rows are skipped a whole iMCU row (16 rows) at a time, without their IDCT.
      ['tall 4:2:0', { chromaSubsampling: '4:2:0' }, 300, 5000],
      ['tall progressive', { progressive: true }, 640, 4100],
      ['tall 4:4:4', { chromaSubsampling: '4:4:4' }, 333, 3617],
      // Chroma 1-2 pixels wide: libjpeg-turbo's plain vertical upsampler, after which skipping rows
      // would hand over stale ones (the fast path reads every row there).
      ['two columns, 4:2:0', { chromaSubsampling: '4:2:0' }, 2, 3000],
      ['four columns, 4:2:0', { chromaSubsampling: '4:2:0' }, 4, 3001],
    ] as const) {
      const result = await expectSameOutcome(await photo(options, w, h), label);
      expect(decoderOf(result), label).toBe('libjpeg');
    }
  });

  it('EXIF orientation: 1 is taken; any rotation is left to sharp, which rotates', async () => {
    const plain = await photo({}, 300, 200);
    // withExif, not withMetadata: the latter also embeds an ICC profile (declined for that).
    const upright = await sharp(plain)
      .withExif({ IFD0: { Orientation: '1' } })
      .toBuffer();
    expect(decoderOf(await expectSameOutcome(upright, 'orientation 1'))).toBe('libjpeg');
    for (const orientation of [3, 6, 8]) {
      // (withExif cannot set the orientation; withMetadata writes it in APP1, before its ICC profile.)
      const rotated = await sharp(plain).withMetadata({ orientation }).toBuffer();
      const result = await expectSameOutcome(rotated, `orientation ${orientation}`);
      expect(declinedOf(result)).toBe('EXIF orientation');
      if ('input' in result && orientation !== 3)
        expect([result.input.decodedWidth, result.input.decodedHeight]).toEqual([200, 300]);
    }
  });

  it('EXIF it cannot read (offsets out of bounds, wrong types) is left to sharp', async () => {
    const plain = await photo({}, 300, 200);
    const app1 = (tiff: number[]) => {
      const payload = Buffer.from([...Buffer.from('Exif\0\0', 'latin1'), ...tiff]);
      const header = Buffer.from([0xff, 0xe1, (payload.length + 2) >> 8, (payload.length + 2) & 0xff]);
      return Buffer.concat([plain.subarray(0, 2), header, payload, plain.subarray(2)]);
    };
    for (const [label, tiff] of [
      ['IFD0 offset past the end', [0x49, 0x49, 42, 0, 0xf0, 0xff, 0xff, 0xff]],
      ['not TIFF', [0x58, 0x58, 42, 0, 8, 0, 0, 0]],
      // One entry: Orientation (0x0112) as a LONG, not a SHORT.
      [
        'orientation of the wrong type',
        [0x49, 0x49, 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 4, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0],
      ],
    ] as const) {
      const result = await expectSameOutcome(app1([...tiff]), label);
      expect(declinedOf(result), label).toBe('unreadable EXIF');
    }
  });

  it('cut-off and corrupted data: the same 4005 or the same pixels as sharp, never a crash', async () => {
    const original = await photo({}, 640, 480);
    const progressive = await photo({ progressive: true }, 640, 480);
    const random = prng(14);
    const cases: Array<[string, Buffer]> = [];
    for (const [name, jpeg] of [
      ['baseline', original],
      ['progressive', progressive],
    ] as const) {
      for (const at of [0.35, 0.6, 0.9, 0.999])
        cases.push([`${name} cut at ${at}`, jpeg.subarray(0, Math.floor(jpeg.length * at))]);
      // Damage in the entropy-coded data, and anywhere (markers, tables, frame and scan headers).
      for (let i = 0; i < 60; i++) {
        const damaged = Buffer.from(jpeg);
        const from = i < 20 ? 700 : 2;
        const at = from + Math.floor(random() * (damaged.length - from - 2));
        damaged[at] = Math.floor(random() * 256);
        if (i % 3 === 0) damaged[at + 1] = Math.floor(random() * 256);
        cases.push([`${name} bytes at ${at} changed`, damaged]);
      }
    }
    let declined = 0;
    for (const [label, bytes] of cases) {
      const result = await expectSameOutcome(bytes, label);
      if ('code' in result || result.input.decoder === 'sharp') declined++;
    }
    // Both kinds occurred: damage libjpeg warns about (declined, then sharp's verdict), and damage it
    // decodes without a word (the same pixels from both).
    expect(declined).toBeGreaterThan(cases.length / 4);
    expect(declined).toBeLessThan(cases.length);
  });

  it('refuses bad arguments with a TypeError or RangeError instead of reading out of bounds', () => {
    const call = jpegToTensor as unknown as (...args: unknown[]) => unknown;
    expect(() => call('not bytes', SIZE, 1e6)).toThrow(TypeError);
    expect(() => call(new Float32Array(4), SIZE, 1e6)).toThrow(TypeError);
    expect(() => call(new Uint8Array(4), 0, 1e6)).toThrow(RangeError);
    expect(jpegToTensor(new Uint8Array(0), SIZE, 1e6)).toMatch(/libjpeg/);
    expect(jpegToTensor(new Uint8Array([0xff, 0xd8, 0xff]), SIZE, 1e6)).toMatch(/libjpeg/);
    // PDQ's filter: fewer bytes than width × height × 3 is refused, never read past.
    const downsample = pdqDownsample as unknown as (...args: unknown[]) => unknown;
    expect(() => downsample(new Float32Array(12), 2, 2, 0)).toThrow(TypeError);
    expect(() => downsample(new Uint8Array(11), 2, 2, 0)).toThrow(RangeError);
    expect(() => downsample(new Uint8Array(12), 0, 2, 0)).toThrow(RangeError);
    expect(() => downsample(new Uint8Array(12), 2, 2, -1)).toThrow(RangeError);
    expect(() => downsample(new Uint8Array(12), 2, 2)).toThrow(TypeError);
    expect(pdqDownsample(new Uint8Array(12), 2, 2, 0)).toHaveLength(64 * 64);
  });

  it("over 16 MP (the scorer's 'if-declined'): full size through the fast path, shrunk on load by sharp when declined", async () => {
    const big = await photo({}, 4900, 3400); // 16.7 MP
    const probed = probeHeader(big, 'jpeg');
    const fast = await toModelInput(big, probed, SIZE, {
      shrinkOnLoad: 'if-declined',
      jpegDecoder: 'libjpeg',
    });
    expect([fast.decoder, fast.decodedWidth]).toEqual(['libjpeg', 4900]);
    const full = await toModelInput(big, probed, SIZE, { jpegDecoder: 'sharp' });
    expect(Buffer.compare(Buffer.from(fast.tensor.buffer), Buffer.from(full.tensor.buffer))).toBe(0);

    const withProfile = await sharp(big).withIccProfile('srgb').toBuffer();
    const shrunk = await toModelInput(withProfile, probeHeader(withProfile, 'jpeg'), SIZE, {
      shrinkOnLoad: 'if-declined',
      jpegDecoder: 'libjpeg',
    });
    // 1/8 scale: the short edge stays at or above 224 (3400 / 8 = 425).
    expect([shrunk.decoder, shrunk.declined, shrunk.decodedWidth]).toEqual([
      'sharp',
      'embedded ICC profile',
      612,
    ]);
  });

  it('declines an image over the pixel limit it is given', async () => {
    expect(jpegToTensor(await photo({}, 640, 480), SIZE, 640 * 480 - 1)).toBe('too many pixels');
  });
});

describe('JPEG_DECODER=sharp', () => {
  it('never uses the fast path', async () => {
    const result = await outcome(await photo({}, 320, 240), 'sharp');
    expect(decoderOf(result)).toBe('sharp');
    expect(declinedOf(result)).toBeUndefined();
  });
});
