import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import { buildBmp, packRows } from '../../../test/fixtures/bmp.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { formatFromMimeType, sniffFormat } from './sniff.ts';

async function sniffCode(bytes: Uint8Array): Promise<number | string> {
  try {
    return await sniffFormat(bytes);
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return (err as ApiError).code;
  }
}

describe('sniffFormat', () => {
  it('detects every whitelisted format from content', async () => {
    expect(await sniffFormat(readFileSync(fixture('320x240.jpg')))).toBe('jpeg');
    expect(await sniffFormat(readFileSync(fixture('swiss.png')))).toBe('png');
    expect(await sniffFormat(readFileSync(fixture('4.webp')))).toBe('webp');
    expect(await sniffFormat(readFileSync(fixture('Crash_test.gif')))).toBe('gif');
    expect(await sniffFormat(readFileSync(fixture('G31D.TIF')))).toBe('tiff');
    expect(
      await sniffFormat(buildBmp({ width: 1, height: 1, bpp: 24, pixelData: packRows([[0]], 24) })),
    ).toBe('bmp');
  });

  it('maps an APNG to png', async () => {
    // Signature, IHDR, acTL before IDAT: file-type calls this image/apng.
    const chunk = (type: string, data: number[]) => {
      const len = Buffer.alloc(4);
      len.writeUInt32BE(data.length);
      return Buffer.concat([len, Buffer.from(type, 'latin1'), Buffer.from(data), Buffer.alloc(4)]);
    };
    const apng = Buffer.concat([
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
      chunk('IHDR', [0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]),
      chunk('acTL', [0, 0, 0, 2, 0, 0, 0, 0]),
      chunk('IDAT', [0]),
    ]);
    expect(await sniffFormat(apng)).toBe('png');
  });

  it('refuses formats outside the whitelist and non-images with 4002', async () => {
    for (const name of [
      'check.svg',
      'circle.svg',
      'struct-image-04-t.svg',
      'pitm.avif',
      'relax.jp2',
      'relax_tileparts.jp2',
    ]) {
      expect(await sniffCode(readFileSync(fixture(name))), name).toBe(4002);
    }
    const others: Array<[string, Uint8Array]> = [
      ['empty', new Uint8Array(0)],
      ['text', Buffer.from('hello, world\n')],
      ['html', Buffer.from('<!doctype html><html><body><img src=x></body></html>')],
      ['pdf', Buffer.from('%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF\n')],
      ['zip', Buffer.from([0x50, 0x4b, 0x03, 0x04, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])],
      ['JPEG-LS', Buffer.from([0xff, 0xd8, 0xff, 0xf7, 0, 0x0b, 8, 0, 1, 0, 1, 1, 1, 0x11, 0])],
      // "BM" / "GIF" followed by text: file-type's two- and three-byte checks match, ours do not.
      ['BM text', Buffer.from('BMW and other cars, a list of models and prices')],
      ['GIF text', Buffer.from('GIFT ideas for the holidays, a list')],
      ['ICO', Buffer.from([0, 0, 1, 0, 1, 0, 16, 16, 0, 0, 1, 0, 32, 0, 0, 0, 0, 0, 22, 0, 0, 0])],
    ];
    for (const [name, bytes] of others) expect(await sniffCode(bytes), name).toBe(4002);
  });

  it('refuses camera RAW in a TIFF container (CR2) with 4002', async () => {
    const cr2 = Buffer.alloc(64);
    cr2.write('II*\0', 0, 'latin1');
    cr2.writeUInt32LE(16, 4);
    cr2.write('CR', 8, 'latin1');
    expect(await sniffCode(cr2)).toBe(4002);
  });

  it('keeps a damaged but whitelisted signature (so the probe answers 4005, not 4002)', async () => {
    // TIFF whose first IFD offset points past the end: file-type gives up, the signature is TIFF.
    const tiff = Buffer.from([0x49, 0x49, 0x2a, 0x00, 0xff, 0xff, 0xff, 0x00, 1, 2, 3]);
    expect(await sniffFormat(tiff)).toBe('tiff');
    // PNG signature with a damaged IHDR length.
    const png = Buffer.from([
      0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 99, 0x49, 0x48, 0x44, 0x52,
    ]);
    expect(await sniffFormat(png)).toBe('png');
    expect(await sniffFormat(Buffer.from([0xff, 0xd8, 0xff]))).toBe('jpeg');
  });
});

describe('formatFromMimeType', () => {
  it('maps the whitelisted types, case-insensitively, ignoring parameters', () => {
    expect(formatFromMimeType('image/jpeg')).toBe('jpeg');
    expect(formatFromMimeType('image/jpg')).toBe('jpeg');
    expect(formatFromMimeType('IMAGE/JPEG; charset=binary')).toBe('jpeg');
    expect(formatFromMimeType(' image/png ')).toBe('png');
    expect(formatFromMimeType('image/webp')).toBe('webp');
    expect(formatFromMimeType('image/bmp')).toBe('bmp');
    expect(formatFromMimeType('image/x-ms-bmp')).toBe('bmp');
    expect(formatFromMimeType('image/x-bmp')).toBe('bmp');
    expect(formatFromMimeType('image/tiff')).toBe('tiff');
    expect(formatFromMimeType('image/gif;x=1')).toBe('gif');
  });

  it('returns undefined for anything else', () => {
    for (const t of [
      'image/svg+xml',
      'image/avif',
      'application/pdf',
      'text/plain',
      '',
      'image/',
      'jpeg',
      'toString',
      '__proto__',
    ]) {
      expect(formatFromMimeType(t), t).toBeUndefined();
    }
  });
});
