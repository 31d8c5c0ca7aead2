import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CORPUS, fixture } from '../../test/fixtures/corpus.ts';
import { ERRORS } from './errors.ts';
import { FORMATS, IMAGE_FORMATS, type ImageFormat } from './image-formats.ts';

const decodable = Object.entries(CORPUS).flatMap(([name, outcome]) =>
  'ok' in outcome ? [[name, outcome.ok.format] as [string, ImageFormat]] : [],
);

describe('the format table', () => {
  it("recognises every corpus image of a format by that format's signature alone", () => {
    for (const [name, format] of decodable) {
      const bytes = readFileSync(fixture(name));
      expect(
        IMAGE_FORMATS.filter((f) => FORMATS[f].signature(bytes)),
        name,
      ).toEqual([format]);
    }
  });

  it("names the formats in 4002's message as spec part 7 does", () => {
    expect(ERRORS.UNSUPPORTED_FORMAT.message).toBe(
      'Unsupported format: send JPEG, PNG, WebP, BMP, TIFF or GIF',
    );
  });
});
