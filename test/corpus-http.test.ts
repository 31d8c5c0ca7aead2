// The whole corpus through the detect endpoint with the real model: every file either scores (200
// with the format, dimensions and frames of the map) or is refused with the map's part-7 code.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { CORPUS, fixture } from './fixtures/corpus.ts';
import { embeddedApp } from './support/embedded-app.ts';

describe('the corpus through POST /api/public/detect', () => {
  let app: Awaited<ReturnType<typeof embeddedApp>>['app'];
  beforeAll(async () => {
    ({ app } = await embeddedApp({ classifier: await createOnnxClassifier({ model: 'mobilenet_v2' }) }));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('covers all 95 files', () => {
    expect(Object.keys(CORPUS)).toHaveLength(95);
  });

  it.each(Object.entries(CORPUS))('%s', async (name, expected) => {
    const body = readFileSync(fixture(name));
    // Multipart, with a misleading part type: the format must come from the bytes.
    const boundary = 'corpus-boundary';
    const payload = Buffer.concat([
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="upload.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      ),
      body,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await app.inject({
      method: 'POST',
      url: '/api/public/detect',
      payload,
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
    });
    const json = res.json();
    if ('ok' in expected) {
      expect(res.statusCode, json.message).toBe(200);
      expect(json.data.image).toMatchObject({ ...expected.ok, bytes: body.length });
      expect(json.data.scores.nsfw).toBeGreaterThanOrEqual(0);
      expect(json.data.scores.nsfw + json.data.scores.sfw).toBeCloseTo(1, 4);
      expect(['allow', 'review', 'block']).toContain(json.data.decision);
    } else {
      expect(res.statusCode).toBe(400);
      expect(json).toEqual({ code: expected.error, message: expect.any(String) });
    }
  });
});
