// No request is dropped while the policy changes: the embedded server (`npm start`, real model) with
// POLICY_FILE answers detect calls that run without pause while the file is swapped several times, as
// the kubelet swaps a ConfigMap volume. Every answer is a 200 whose thresholds are those of a policy in
// force while it ran (the one before the swap or the one after) and whose decision follows them; after
// the last swap the decisions follow the new thresholds. The upload limit of the policy applies too.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decisionFor, type Thresholds } from '../services/detect/result.ts';
import { fixture } from './fixtures/corpus.ts';
import { applied, type PolicyMount, policyMount, policyText } from './support/policy-mount.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));

interface Answer {
  status: number;
  code?: number;
  message?: string;
  data?: { decision: string; scores: { nsfw: number }; thresholds: Thresholds };
}

let mount: PolicyMount;
let server: ServerProcess;

beforeAll(async () => {
  mount = policyMount(policyText({ generation: 1 }));
  // MAX_FILE_BYTES just above the image: the cap on the policy's upload limit is visible.
  server = await startServer({ POLICY_FILE: mount.file, MAX_FILE_BYTES: String(JPEG.length + 100) });
}, 300_000);

afterAll(async () => {
  await server?.stop();
  mount?.remove();
});

const detect = async (body: typeof JPEG = JPEG): Promise<Answer> => {
  const res = await fetch(`${server.url}/api/public/detect`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg' },
    body,
  });
  return { status: res.status, ...((await res.json()) as Omit<Answer, 'status'>) };
};

/** Resolves once `done()` holds, checking every 20 ms; rejects with `what` after a generous bound. */
async function until(what: string, done: () => boolean): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it('drops no request while the thresholds change under a continuous load; decisions follow each policy', async () => {
  const first = await detect();
  expect(first.status).toBe(200);
  const nsfw = first.data?.scores.nsfw as number;
  expect(nsfw).toBeGreaterThan(0);
  expect(nsfw).toBeLessThan(1);
  // Thresholds around this image's score, so that each policy gives it another decision.
  const review: Thresholds = { allow: nsfw / 2, block: (nsfw + 1) / 2 };
  const block: Thresholds = { allow: nsfw / 4, block: nsfw / 2 };
  const allow: Thresholds = { allow: (nsfw + 1) / 2, block: (nsfw + 3) / 4 };
  const policies: Thresholds[] = [{ allow: 0.2, block: 0.8 }, review, block, allow, review, block];

  let written = 0; // index in `policies` of the last file written
  let seen = 0; // the highest index an answer has shown
  let stop = false;
  let straddled = 0; // requests sent before a swap and answered after it
  const failures: string[] = [];
  let answered = 0;

  const worker = async () => {
    while (!stop) {
      const sentUnder = written;
      let answer: Answer;
      try {
        answer = await detect();
      } catch (err) {
        failures.push(`request failed: ${String((err as Error).cause ?? err)}`);
        continue;
      }
      answered++;
      if (written > sentUnder) straddled++;
      if (answer.status !== 200 || !answer.data) {
        failures.push(`answered ${answer.status} ${answer.code}: ${answer.message}`);
        continue;
      }
      const { thresholds, decision, scores } = answer.data;
      // In force while it ran: the policy before the last swap at send time, up to the last written.
      const index = policies.findIndex(
        (p, i) =>
          i >= Math.max(0, sentUnder - 1) &&
          i <= written &&
          p.allow === thresholds.allow &&
          p.block === thresholds.block,
      );
      if (index < 0)
        failures.push(`thresholds ${JSON.stringify(thresholds)} not in force (sent under ${sentUnder})`);
      else seen = Math.max(seen, index);
      if (decision !== decisionFor(scores.nsfw, thresholds))
        failures.push(`decision ${decision} for ${scores.nsfw} under ${JSON.stringify(thresholds)}`);
    }
  };
  const workers = Array.from({ length: 4 }, worker);

  try {
    for (let i = 1; i < policies.length; i++) {
      // Requests in flight under the current policy before each swap.
      const before = answered;
      await until(`answers under policy ${i - 1}`, () => answered >= before + 4);
      written = i;
      mount.write(policyText({ generation: i + 1, thresholds: policies[i] as Thresholds }));
      await until(`an answer under policy ${i}`, () => seen >= i || failures.length > 0);
      expect(failures).toEqual([]);
    }
    const settled = answered;
    await until('more answers under the last policy', () => answered >= settled + 8);
  } finally {
    stop = true;
    await Promise.all(workers);
  }
  expect(failures).toEqual([]);
  expect(straddled, 'some requests ran across a swap').toBeGreaterThan(0);
  for (let g = 1; g <= policies.length; g++)
    expect(applied(server.logLines, g), `generation ${g}`).toBe(true);
  // After the last swap: the last policy's thresholds and decision, for every request.
  for (let i = 0; i < 3; i++) {
    const answer = await detect();
    expect(answer.status).toBe(200);
    expect(answer.data?.thresholds).toEqual(block);
    expect(answer.data?.decision).toBe('block');
  }
}, 300_000);

it("refuses an upload over the policy's upload.maxBytes with 4003, and takes it again once raised", async () => {
  mount.write(policyText({ generation: 20, upload: { maxBytes: JPEG.length - 1 } }));
  await until('policy 20', () => applied(server.logLines, 20));
  const refused = await detect();
  expect(refused.status).toBe(400);
  expect(refused.code).toBe(4003);
  expect(JSON.stringify(refused)).toContain(`the limit is ${JPEG.length - 1} bytes`);
  mount.write(policyText({ generation: 21, upload: { maxBytes: JPEG.length } }));
  await until('policy 21', () => applied(server.logLines, 21));
  expect((await detect()).status).toBe(200);
  // Above MAX_FILE_BYTES the configuration's limit stays: the policy can only lower it.
  mount.write(policyText({ generation: 22, upload: { maxBytes: 10 * JPEG.length } }));
  await until('policy 22', () => applied(server.logLines, 22));
  const over = await detect(Buffer.concat([JPEG, Buffer.alloc(200)]));
  expect(over.status).toBe(400);
  expect(over.code).toBe(4003);
  expect(JSON.stringify(over)).toContain(`the limit is ${JPEG.length + 100} bytes`);
  expect((await detect()).status).toBe(200);
}, 120_000);
