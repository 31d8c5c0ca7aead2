// A small file whose header claims a huge image, through the detect endpoint: answered 4005, never scored.

import { describe, expect, it } from 'vitest';
import { forgedHugeJpeg } from '../../../test/fixtures/corpus.ts';
import { embeddedApp } from '../../../test/support/embedded-app.ts';
import { FakeClassifier } from '../../../test/support/fake-classifier.ts';

describe('a forged JPEG header through the detect endpoint', () => {
  it('the 676-byte JPEG claiming 14000×14000 → 400 / 4005, and the model never runs', async () => {
    const classifier = new FakeClassifier();
    const { app } = await embeddedApp({ classifier });
    try {
      const t0 = performance.now();
      const res = await app.inject({
        method: 'POST',
        url: '/api/public/detect',
        payload: forgedHugeJpeg(),
        headers: { 'content-type': 'image/jpeg' },
      });
      console.log(`forged JPEG answered in ${(performance.now() - t0).toFixed(1)} ms`);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toMatchObject({ code: 4005 });
      expect(classifier.calls).toBe(0);
    } finally {
      await app.close();
    }
  });
});
