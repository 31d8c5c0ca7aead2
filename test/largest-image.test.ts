// Every image within the spec's limits is answered: the default decode budget (embedded) and the chart's
// default memory limit leave room for the worst image the limits allow, admitted alone; and the 196 MP
// progressive 4:4:4 JPEG (its coefficient buffer alone ~1.1 GiB) is scored with the default
// configuration, through the detect endpoint, with the real model.
//
// Cost: one decode of that JPEG (~2 s of CPU, ~1.2 GB resident at its peak; decode-memory-peak.test.ts
// measures it) — a few seconds on an idle machine.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_FILE_BYTES } from '../lib/common/http-limits.ts';
import { loadUploadConfig, PROCESS_RESERVE_BYTES } from '../services/detect/config.ts';
import { decodeMemoryBytes } from '../services/detect/image/decode-memory.ts';
import { worstJpegDecodeBytes } from '../services/detect/image/image-cost.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { embeddedApp } from './support/embedded-app.ts';
import { hostileImage, type ScanSpec, writeProgressiveJpeg } from './support/hostile-images.ts';
import { multipart } from './support/multipart.ts';
import { REPO } from './support/paths.ts';

const MiB = 1024 * 1024;
const DEFAULTS = loadUploadConfig({});

/** A 4-component (CMYK) progressive JPEG of `width` × `height`, its file filled to 50 MB with APP1 segments. */
function worstShapedJpeg(width: number, height: number): Buffer {
  const dcOnly: ScanSpec[] = [{ components: [0, 1, 2, 3], ss: 0, se: 0, ah: 0, al: 0 }];
  const image = writeProgressiveJpeg({ width, height, components: 4, scans: dcOnly });
  const segment = Buffer.concat([Buffer.from([0xff, 0xe1, 0xff, 0xff]), Buffer.alloc(0xfffd)]);
  const count = Math.floor((DEFAULT_MAX_FILE_BYTES - image.length) / segment.length);
  return Buffer.concat([image.subarray(0, 2), ...Array<Buffer>(count).fill(segment), image.subarray(2)]);
}

describe('the defaults admit the worst image the limits allow', () => {
  it('the default decode budget holds the largest estimate of any JPEG within the limits', () => {
    const worst = worstJpegDecodeBytes(DEFAULTS.limits.jpeg, DEFAULT_MAX_FILE_BYTES);
    expect(DEFAULTS.concurrency.decodeBytes).toBeGreaterThanOrEqual(worst);
    // Shapes at the limits: square, and the longest edge; 4 full-resolution components, 50 MB of metadata.
    for (const [width, height] of [
      [14142, 14142],
      [30000, 6666],
    ] as const) {
      const bytes = worstShapedJpeg(width, height);
      expect(bytes.length).toBeLessThanOrEqual(DEFAULT_MAX_FILE_BYTES);
      const estimate = decodeMemoryBytes(bytes, probeHeader(bytes, 'jpeg'));
      expect(estimate).toBeLessThanOrEqual(worst);
      expect(estimate).toBeGreaterThan(worst * 0.98); // the bound is tight, not a guess
    }
  });

  it("the chart's default memory limit leaves a decode budget that holds it too", () => {
    const values = readFileSync(join(REPO, 'charts/nsfwdetector/values.yaml'), 'utf8');
    const detect = values.slice(values.indexOf('\ndetect:'));
    const limit = /limits: \{ cpu: "[^"]+", memory: (\d+)Mi \}/.exec(detect)?.[1];
    expect(limit).toBeDefined();
    const chart = loadUploadConfig({ CONTAINER_MEMORY_LIMIT_BYTES: String(Number(limit) * MiB) });
    expect(chart.concurrency.decodeBytes).toBe(
      Number(limit) * MiB - DEFAULTS.concurrency.uploadBytes - PROCESS_RESERVE_BYTES,
    );
    expect(chart.concurrency.decodeBytes).toBeGreaterThanOrEqual(DEFAULTS.concurrency.decodeBytes);
  });
});

describe('the 196 MP progressive 4:4:4 JPEG with the default configuration', () => {
  let app: Awaited<ReturnType<typeof embeddedApp>>['app'] | undefined;
  beforeAll(async () => {
    ({ app } = await embeddedApp({ classifier: await createOnnxClassifier({ model: 'mobilenet_v2' }) }));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('is scored (200), not refused for the decode budget', { timeout: 300_000 }, async () => {
    const bytes = await hostileImage('jpeg-progressive-444-196mp');
    const estimate = decodeMemoryBytes(bytes, probeHeader(bytes, 'jpeg'));
    expect(estimate).toBeGreaterThan(1100 * MiB);
    const { body, contentType } = multipart([
      { name: 'file', data: bytes, filename: 'large.jpg', contentType: 'image/jpeg' },
    ]);
    const res = await app?.inject({
      method: 'POST',
      url: '/api/public/detect',
      payload: body,
      headers: { 'content-type': contentType },
    });
    expect(res?.statusCode, res?.body).toBe(200);
    const data = res?.json().data;
    expect(data.image).toMatchObject({ width: 14000, height: 14000, format: 'jpeg', bytes: bytes.length });
    expect(data.scores.nsfw).toBeGreaterThanOrEqual(0);
    expect(data.scores.nsfw).toBeLessThanOrEqual(1);
  });
});
