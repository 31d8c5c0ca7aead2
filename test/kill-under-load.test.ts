// Kills under legitimate load: at a short limit, images that cost far more to decode than it allows,
// sent again and again beside ordinary ones. Terminating a scoring thread in the middle of another
// image's ONNX run would abort the process (`terminate called after throwing an instance of
// 'Napi::Error'`) and fail the other images of its worker, which is why decoding runs in decoder
// processes, killed alone. Every costly image is answered 400/4005, every
// ordinary one 200, and the server is still alive and ready at the end.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { hostileImage } from './support/hostile-images.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';
import { JPEG } from './support/stack-client.ts';
import { describeWithTool, JPEG_TENSOR_ADDON } from './support/tools.ts';

const ROUNDS = 8;

describeWithTool([JPEG_TENSOR_ADDON], 'kills under legitimate load', () => {
  let server: ServerProcess;
  let costly: Buffer;
  beforeAll(async () => {
    // 16 MP of noise: ~0.2-0.4 s of CPU to decode, over the 100 ms limit below; an ordinary 320×240
    // JPEG takes a few ms.
    costly = await hostileImage('jpeg-noise-16mp');
    server = await startServer({
      // A short CPU limit kills each costly decode; the wall deadline is long enough that a decoder
      // starved on a busy machine (replacements starting beside it) still reaches 100 ms of CPU first.
      SCORING_DEADLINE_MS: '10000',
      DECODE_CPU_LIMIT_MS: '100',
      ANON_PER_MINUTE: '100000',
      ANON_PER_DAY: '100000',
    });
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
  });

  const detect = (body: Buffer) =>
    fetch(`${server.url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: new Uint8Array(body),
    }).then(async (res) => ({
      status: res.status,
      body: (await res.json()) as { code: number; message: string },
    }));

  it('survives every kill, answers each costly image 4005 and every ordinary one beside it 200', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const answers = await Promise.all([
        detect(costly),
        ...Array.from({ length: 3 }, () => detect(JPEG)),
        detect(costly),
        ...Array.from({ length: 3 }, () => detect(JPEG)),
      ]);
      const [a, b] = [answers[0], answers[4]];
      for (const killed of [a, b]) {
        expect(killed?.status, `round ${round}: ${JSON.stringify(killed?.body)}`).toBe(400);
        expect(killed?.body.code).toBe(4005);
        expect(killed?.body.message).toMatch(/CPU time/);
      }
      const ordinary = answers.filter((_, i) => i !== 0 && i !== 4);
      expect(
        ordinary.map((o) => o.status),
        `round ${round}`,
      ).toEqual(Array(6).fill(200));
    }
    expect(server.proc.exitCode).toBeNull();
    expect(server.output()).not.toMatch(/terminate called/);
    expect((await fetch(`${server.url}/internal/live`)).status).toBe(200);
    await expect
      .poll(async () => (await fetch(`${server.url}/internal/ready`)).status, { timeout: 30_000 })
      .toBe(200);
    expect((await detect(JPEG)).status).toBe(200);
  }, 300_000);
});
