// Frames scored, end to end through the scorer `npm start` builds (decoder processes, then the inference
// workers): with MAX_FRAMES_SCORED=8 an animated WebP whose sixth frame (index 5) is the corpus picture
// the issue measured answers that frame's score with `image.frames_scored` 8 and
// `image.decisive_frame` 5; by default (the spec) the first, blank frame answers, frames_scored 1.
// A DetectionPolicy's maxFramesScored (the mounted policy file) applies from the next request on, as its
// thresholds do.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { afterEach, describe, expect, it } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { animationOf } from '../../test/support/animations.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { eventually } from '../../test/support/eventually.ts';
import { policyMount, policyText } from '../../test/support/policy-mount.ts';
import { loadScorer } from './scoring/scoring-pool.ts';

type Built = Awaited<ReturnType<typeof embeddedApp>>;
let built: Built | undefined;

afterEach(async () => {
  await built?.app.close();
  await built?.model.close();
  built = undefined;
});

async function animation(): Promise<Buffer> {
  const picture = await sharp(readFileSync(fixture('input.below.composite.premultiplied.png')))
    .flatten({ background: '#ffffff' })
    .resize(160, 160)
    .png()
    .toBuffer();
  const frames = await Promise.all(
    Array.from({ length: 8 }, (_, i) => {
      const grey = 255 - 16 * i;
      return i === 5
        ? picture
        : sharp({
            create: { width: 160, height: 160, channels: 3, background: { r: grey, g: grey, b: grey } },
          })
            .png()
            .toBuffer();
    }),
  );
  return animationOf('webp', frames);
}

async function start(env: Record<string, string>): Promise<Built> {
  built = await embeddedApp({ env });
  built.model.fill(
    await loadScorer(built.config, (err) => {
      throw err;
    }),
  );
  return built;
}

async function detect(env: Record<string, string>, body: Buffer) {
  return answer(await start(env), body);
}

async function answer(built: Built, body: Buffer) {
  const res = await built.app.inject({
    method: 'POST',
    url: '/api/public/detect',
    headers: { 'content-type': 'image/webp' },
    payload: body,
  });
  expect(res.statusCode).toBe(200);
  return res.json().data as {
    decision: string;
    scores: { nsfw: number };
    image: { frames: number; frames_scored: number; decisive_frame: number };
  };
}

describe('frames scored, end to end', () => {
  it('answers the first frame by default, the decisive one with MAX_FRAMES_SCORED=8', async () => {
    const webp = await animation();
    const byDefault = await detect({ MODEL: 'mobilenet_v2' }, webp);
    expect(byDefault.image).toMatchObject({ frames: 8, frames_scored: 1, decisive_frame: 0 });
    expect(byDefault.decision).toBe('allow');
    await built?.app.close();
    await built?.model.close();
    const eight = await detect({ MODEL: 'mobilenet_v2', MAX_FRAMES_SCORED: '8' }, webp);
    expect(eight.image).toMatchObject({ frames: 8, frames_scored: 8, decisive_frame: 5 });
    expect(eight.scores.nsfw).toBeGreaterThan(0.5);
    expect(eight.decision).not.toBe('allow');
  }, 120_000);

  it("applies a DetectionPolicy's maxFramesScored from its next request on, and MAX_FRAMES_SCORED again once the policy leaves it out", async () => {
    const webp = await animation();
    const mount = policyMount(policyText({ generation: 1 }));
    try {
      const app = await start({ MODEL: 'mobilenet_v2', POLICY_FILE: mount.file });
      expect((await answer(app, webp)).image).toMatchObject({ frames_scored: 1, decisive_frame: 0 });
      mount.write(policyText({ generation: 2, maxFramesScored: 8 }));
      const eight = await eventually('the policy to score 8 frames', async () => {
        const data = await answer(app, webp);
        return data.image.frames_scored === 8 ? data : undefined;
      });
      expect(eight.image).toMatchObject({ frames: 8, frames_scored: 8, decisive_frame: 5 });
      expect(eight.scores.nsfw).toBeGreaterThan(0.5);
      mount.write(policyText({ generation: 3 }));
      await eventually('the configured first frame again', async () =>
        (await answer(app, webp)).image.frames_scored === 1 ? true : undefined,
      );
    } finally {
      mount.remove();
    }
  }, 120_000);
});
