// PDQ (pdq.ts) against Meta's own: threatexchange 1.2.17's hasher over pdqhash 0.2.8 (the C++ reference,
// pdqhashing.cpp + downscaling.cpp), in the venv .ci/install-tools.sh makes (install_pdq_reference).
// - The same pixels: the frame the service decodes for the model, given to both. Bit for bit the same
//   hash, quality and eight dihedral hashes on every corpus image and on hand-made edge cases (flat, 1×N
//   and N×1, under and at the 5-pixel minimum, exactly 64×64, alpha, 16-bit, either side of 512), from
//   both filters (the addon's pdq-downsample.c and pdq.ts's): each repeats every float32 operation of
//   the reference in its order, and pdqhash's luma (numpy, in doubles) exactly. Twice: with the frame as
//   the service hashes it (a side of 1024 or more averaged over blocks first, pdq.ts's pdqReduce, redone
//   in the Python script with numpy), whichever decoder made the frame (the JPEG fast path feeds the
//   addon's filter as it decodes); and with the frame itself, as threatexchange's Python hasher takes it.
//   How far apart the two hashes of a reduced frame are is measured and bounded.
// - The files, each side decoding them itself: Pillow applies no EXIF orientation or ICC profile and does
//   not flatten alpha, so some differ; printed (how many equal, the largest distance), not asserted.
// Needs the venv; under CI=true a missing one fails the suite.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { pdqDistance } from '../../lib/hash-lists/pdq-hex.ts';
import { decodeRgb, toModelInput } from '../../services/detect/image/decode.ts';
import {
  type ImagePdq,
  PDQ_FILTER,
  PDQ_MAX_BLOCK,
  PDQ_REDUCE_SIDE,
  pdqBlocks,
  pdqOfFrame,
} from '../../services/detect/image/pdq.ts';
import { probeHeader } from '../../services/detect/image/probe.ts';
import { sniffFormat } from '../../services/detect/image/sniff.ts';
import { InProcessScorer, needsShrinkOnLoad } from '../../services/detect/scoring/image-scorer.ts';
import { TOOLS_DIR } from '../../tools/stack/tools.ts';
import { CORPUS, fixture } from '../fixtures/corpus.ts';
import { FakeClassifier } from '../support/fake-classifier.ts';
import { describeWithTool, tool } from '../support/tools.ts';

/** Keep in step with PDQHASH_VERSION / THREATEXCHANGE_VERSION in .ci/install-tools.sh. */
const VENV_PYTHON = path.join(TOOLS_DIR, 'pdq-0.2.8-threatexchange-1.2.17', 'bin', 'python');
const REFERENCE = tool('pdqhash + threatexchange venv', 'bash .ci/install-tools.sh', { path: VENV_PYTHON });
const SCRIPT = path.join(import.meta.dirname, 'pdq-reference.py');

/**
 * The most bits the blocks may move a corpus photo's hash (quality ≥ 50) from the hash of the frame
 * itself: Meta's match threshold, so a list entry made from the full-size photo still matches it.
 */
const MAX_REDUCE_DISTANCE = 31;

interface Hashed {
  hash: string;
  quality: number;
  dihedral: string[];
}

interface Reference extends Hashed {
  name: string;
  /** Whether the frame was averaged over blocks first (pdqReduce). */
  reduced: boolean;
  /** The frame itself hashed (threatexchange's Python hasher). */
  full: Hashed;
  file?: { hash: string; quality: number } | { error: string };
}

/** Hand-made images, as files: each goes through the service's decoder like an upload. */
async function edgeCases(): Promise<Record<string, Buffer>> {
  const flat = (width: number, height: number) =>
    sharp({ create: { width, height, channels: 3, background: '#808080' } })
      .png()
      .toBuffer();
  const noise = (width: number, height: number, channels: 3 | 4 = 3) => {
    const data = Buffer.alloc(width * height * channels);
    let s = 12345;
    for (let i = 0; i < data.length; i++) {
      s = (s * 1103515245 + 12345) >>> 0;
      data[i] = s >>> 24;
    }
    return sharp(data, { raw: { width, height, channels } });
  };
  return {
    'flat 300×200': await flat(300, 200),
    'flat 64×64': await flat(64, 64),
    '1×200': await noise(1, 200).png().toBuffer(),
    '200×1': await noise(200, 1).png().toBuffer(),
    '4×4 (under the minimum)': await noise(4, 4).png().toBuffer(),
    '5×5 (the minimum)': await noise(5, 5).png().toBuffer(),
    '64×64 (no filter)': await noise(64, 64).png().toBuffer(),
    '65×63': await noise(65, 63).png().toBuffer(),
    '1000×17': await noise(1000, 17).png().toBuffer(),
    'alpha 257×129': await noise(257, 129, 4).png().toBuffer(),
    '16-bit 300×180': await noise(300, 180).png({ compressionLevel: 1 }).toColourspace('rgb16').toBuffer(),
    '1023×200 (not reduced)': await noise(1023, 200).png().toBuffer(),
    '1024×200 (reduced along its width)': await noise(1024, 200).png().toBuffer(),
    '1101×1537 (reduced, remainders dropped)': await noise(1101, 1537).png().toBuffer(),
  };
}

describeWithTool(REFERENCE, 'PDQ against pdqhash 0.2.8 / threatexchange 1.2.17', () => {
  const ours = new Map<
    string,
    {
      served: ImagePdq;
      fromPixels: ImagePdq;
      fromPixelsJs: ImagePdq;
      /** The frame hashed without the resize, by each filter. */
      whole: ImagePdq;
      wholeJs: ImagePdq;
      decoder: string;
      file?: string;
    }
  >();
  const refs = new Map<string, Reference>();
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'pdq-parity-'));
    const scorer = new InProcessScorer(new FakeClassifier(), undefined, undefined, 8, undefined, true);
    const inputs: [string, Buffer, string | undefined][] = [];
    for (const [name, outcome] of Object.entries(CORPUS)) {
      if ('ok' in outcome) inputs.push([name, readFileSync(fixture(name)), fixture(name)]);
    }
    for (const [name, bytes] of Object.entries(await edgeCases())) inputs.push([name, bytes, undefined]);
    const jobs: object[] = [];
    for (const [name, bytes, file] of inputs) {
      const probed = probeHeader(bytes, await sniffFormat(bytes));
      const served = (await scorer.score(new Uint8Array(bytes), probed)).pdq;
      if (!served) throw new Error(`${name}: the service answered no PDQ`);
      // Which decoder made the frame: the fast path decodes at full size, sharp shrinks huge JPEGs on load.
      const { decoder } = await toModelInput(bytes, probed, 224, {
        maxTiles: 8,
        shrinkOnLoad: needsShrinkOnLoad(probed) ? 'if-declined' : false,
      });
      const shrinkOnLoad = decoder === 'sharp' && needsShrinkOnLoad(probed);
      const decoded = await decodeRgb(bytes, probed, { shrinkOnLoad });
      ours.set(name, {
        served,
        fromPixels: pdqOfFrame(decoded.rgb, decoded.width, decoded.height),
        fromPixelsJs: pdqOfFrame(decoded.rgb, decoded.width, decoded.height, 'js'),
        whole: pdqOfFrame(decoded.rgb, decoded.width, decoded.height, PDQ_FILTER, 0),
        wholeJs: pdqOfFrame(decoded.rgb, decoded.width, decoded.height, 'js', 0),
        decoder,
        file,
      });
      const rgb = path.join(dir, `${jobs.length}.rgb`);
      await writeFile(rgb, decoded.rgb);
      jobs.push({ name, rgb, width: decoded.width, height: decoded.height, ...(file && { file }) });
    }
    await scorer.close();
    await writeFile(path.join(dir, 'jobs.json'), JSON.stringify(jobs));
    const out = execFileSync(VENV_PYTHON, [SCRIPT, path.join(dir, 'jobs.json')], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    });
    for (const line of out.trim().split('\n')) {
      const ref = JSON.parse(line) as Reference;
      refs.set(ref.name, ref);
    }
  }, 900_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('answers for every corpus image the service scores and every edge case', () => {
    expect(refs.size).toBe(ours.size);
    expect(ours.size).toBeGreaterThan(60);
  });

  it('hashes the frame the service decodes, whole, before trims and tiles', () => {
    for (const [name, o] of ours) expect(o.served, name).toEqual(o.fromPixels);
    // The JPEG fast path's hashes (its decoder feeding the addon's filter) are among them, where built.
    const fast = [...ours.values()].filter((o) => o.decoder === 'libjpeg').length;
    console.log(`PDQ filter: ${PDQ_FILTER}; ${fast} of ${ours.size} frames decoded by the JPEG fast path`);
    if (process.env.CI === 'true') expect(PDQ_FILTER).toBe('native');
    if (PDQ_FILTER === 'native') expect(fast).toBeGreaterThan(4);
  });

  const same = (ours: ImagePdq, ref: Hashed, what: string) => {
    expect(ours.hash, what).toBe(ref.hash);
    expect(ours.quality, what).toBe(ref.quality);
    expect(ours.variants, what).toEqual(ref.dihedral);
  };

  it('gives the same hash, quality and dihedral hashes as pdqhash from the same pixels, bit for bit', () => {
    let qualities = 0;
    for (const [name, o] of ours) {
      const ref = refs.get(name) as Reference;
      same(o.fromPixels, ref, name);
      expect(o.fromPixelsJs, `${name} (pdq.ts's filter)`).toEqual(o.fromPixels);
      same(o.whole, ref.full, `${name}, not resized`);
      expect(o.wholeJs, `${name}, not resized (pdq.ts's filter)`).toEqual(o.whole);
      if (ref.quality > 0 && ref.quality < 100) qualities++;
    }
    // The comparison covers more than the all-or-nothing qualities of 0 and 100.
    expect(qualities).toBeGreaterThan(3);
    expect(refs.get('flat 300×200')?.quality).toBe(0);
    expect(refs.get('4×4 (under the minimum)')?.hash).toBe('0'.repeat(64));
    // Both sides of the reduction's threshold are covered.
    expect(refs.get('1023×200 (not reduced)')?.reduced).toBe(false);
    expect(refs.get('1024×200 (reduced along its width)')?.reduced).toBe(true);
    expect(refs.get('1101×1537 (reduced, remainders dropped)')?.reduced).toBe(true);
  });

  it('stays within the match distance of the hash of the frame itself, for the photos it reduces', () => {
    const distances: { name: string; distance: number; quality: number }[] = [];
    for (const [name, o] of ours) {
      const ref = refs.get(name) as Reference;
      if (!ref.reduced || !o.file) continue;
      distances.push({ name, distance: pdqDistance(ref.hash, ref.full.hash), quality: ref.quality });
    }
    distances.sort((a, b) => a.distance - b.distance);
    const median = distances[Math.floor(distances.length / 2)]?.distance;
    const worst = distances.at(-1);
    console.log(
      `PDQ of the reduced frame vs the frame itself: ${distances.length} corpus frames, distances ${distances.map((d) => d.distance).join(' ')} (median ${median}, largest ${worst?.distance}: ${worst?.name}, quality ${worst?.quality})`,
    );
    expect(distances.length).toBeGreaterThan(8);
    for (const d of distances)
      if (d.quality >= 50) expect(d.distance, d.name).toBeLessThanOrEqual(MAX_REDUCE_DISTANCE);
  });

  it('caps a block at PDQ_MAX_BLOCK rows (16-bit column sums), the same in both filters', () => {
    // Over the default edge limits (30,000 pixels), so made here rather than decoded.
    const [width, height] = [5, 140_000];
    const rgb = new Uint8Array(width * height * 3);
    for (let i = 0; i < rgb.length; i++) rgb[i] = (i * 2654435761) >>> 24;
    expect(pdqBlocks(width, height, PDQ_REDUCE_SIDE)).toEqual({
      kx: 1,
      ky: PDQ_MAX_BLOCK,
      width: 5,
      height: 544,
    });
    expect(pdqOfFrame(rgb, width, height, 'js')).toEqual(pdqOfFrame(rgb, width, height));
  });

  it('prints how threatexchange hashes the files themselves (Pillow decoding them)', () => {
    let equal = 0;
    let compared = 0;
    let worst = { distance: 0, name: '' };
    for (const [name, o] of ours) {
      const file = refs.get(name)?.file;
      if (!o.file || !file || 'error' in file) continue;
      compared++;
      const distance = pdqDistance(o.served.hash, file.hash);
      if (distance === 0) equal++;
      if (distance > worst.distance) worst = { distance, name };
    }
    console.log(
      `PDQ of the files, threatexchange's pdq_from_file vs the service: ${equal} of ${compared} equal, largest distance ${worst.distance}${worst.name ? ` (${worst.name})` : ''}`,
    );
    expect(compared).toBeGreaterThan(40);
  });
});
