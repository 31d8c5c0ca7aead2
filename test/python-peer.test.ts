// The Python peer of `npm run bench` (bench/python-peer/server.py) computes our scores: the
// bench compares the two servers only after checking that on its images; this guards the same in CI.
// Two corpus images that exercise the parts of the pipeline the bench's plain JPEGs do not: EXIF
// orientation (Landscape_5.jpg) and alpha flattened onto white (blackbug.png). The peer runs as the
// bench runs it (uvicorn's command line), with one worker; ours is the production unit of work.
// Needs the peer's venv (.ci/install-tools.sh); under CI=true a missing one fails the suite.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  findPeerPython,
  PEER_INSTALL,
  PEER_SCORE_BOUND,
  PEER_VENV,
  type PeerProcess,
  startPeer,
} from '../bench/python-peer/venv.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { summarize } from '../services/detect/model/classifier.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { InProcessScorer } from '../services/detect/scoring/image-scorer.ts';
import { fixture } from './fixtures/corpus.ts';
import { describeWithTool, type Tool } from './support/tools.ts';

const PYTHON_PEER: Tool = {
  name: `python peer venv (${PEER_VENV})`,
  install: PEER_INSTALL,
  find: findPeerPython,
};
const IMAGES = ['Landscape_5.jpg', 'blackbug.png'];

describeWithTool(PYTHON_PEER, 'the Python peer of the benchmark', () => {
  let peer: PeerProcess | undefined;
  beforeAll(async () => {
    peer = await startPeer({ workers: 1 });
  }, 120_000);
  afterAll(async () => {
    await peer?.stop();
  });

  it(`answers our scores.nsfw (within ${PEER_SCORE_BOUND}) on ${IMAGES.join(' and ')}`, async () => {
    const scorer = new InProcessScorer(await createOnnxClassifier({ model: 'mobilenet_v2' }));
    try {
      for (const name of IMAGES) {
        const bytes = readFileSync(fixture(name));
        const ours = summarize(
          (await scorer.score(bytes, probeHeader(bytes, await sniffFormat(bytes)))).scores,
          'mobilenet_v2',
        ).nsfw;
        const res = await fetch(`${peer?.url}/api/public/detect`, {
          method: 'POST',
          body: new Uint8Array(bytes),
          headers: { 'content-type': 'application/octet-stream' },
        });
        expect(res.status, name).toBe(200);
        const body = (await res.json()) as { data: { scores: { nsfw: number } } };
        const delta = Math.abs(body.data.scores.nsfw - ours);
        console.log(`python peer, ${name}: ours ${ours}, peer ${body.data.scores.nsfw}, |Δ| ${delta}`);
        expect(delta, name).toBeLessThanOrEqual(PEER_SCORE_BOUND);
      }
    } finally {
      await scorer.close();
    }
  }, 60_000);
});
