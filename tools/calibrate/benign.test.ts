// The CI check on false blocks: the benign corpus (benign-corpus.ts, fetched with apt-get into its cache)
// scored with every model of the record (benign-baseline.json), and no model may block more of it than
// the record says — a change to the layout, the decoder or a model that makes real photographs blocked
// fails here, naming the images. To accept a change that moves the record: `npm run calibrate:benign --
// --write`, and say why in the commit. The comparison itself is tested on made-up figures first.

import { describe, expect, it } from 'vitest';
import { describeWithTool, tool } from '../../test/support/tools.ts';
import { type BenignBaseline, benignRegressions, readBaseline, scoreBenign } from './benign-main.ts';

const APT_GET = tool('apt-get', 'a Debian machine (apt-get download fetches the benign corpus)');
const DPKG_DEB = tool('dpkg-deb', 'a Debian machine (dpkg-deb unpacks the benign corpus)');

const shares = (block: number, blocked: string[] = []) => ({
  images: 10,
  allow: 10 - block,
  review: 0,
  block,
  refused: 0,
  blocked,
});
const record = (block: number, blocked?: string[]): BenignBaseline => ({
  images: 10,
  thresholds: { allow: 0.1, block: 0.9 },
  models: { mobilenet_v2: shares(block, blocked) },
});

describe('benignRegressions', () => {
  it('passes the same or fewer blocks, and names the images a model newly blocks', () => {
    expect(benignRegressions(record(1, ['a: x.jpg (0.95)']), record(1, ['a: x.jpg (0.97)']))).toEqual([]);
    expect(benignRegressions(record(1, ['a: x.jpg (0.95)']), record(0))).toEqual([]);
    const worse = benignRegressions(
      record(1, ['a: x.jpg (0.95)']),
      record(2, ['a: x.jpg (0.95)', 'b: y.png (0.91)']),
    );
    expect(worse).toEqual(['mobilenet_v2: blocks 2 benign images, the record 1: b: y.png (0.91)']);
  });

  it('fails on another corpus or a model the record lacks', () => {
    expect(benignRegressions(record(0), { ...record(0), images: 11 })[0]).toMatch(/corpus has 11 images/);
    expect(benignRegressions(record(0), { ...record(0), models: { open_nsfw: shares(0) } })[0]).toMatch(
      /open_nsfw: not in the record/,
    );
  });
});

describeWithTool([APT_GET, DPKG_DEB], 'false blocks on the benign corpus', () => {
  it('blocks no more benign images with any model than the record says', async () => {
    const baseline = readBaseline();
    const now = await scoreBenign(Object.keys(baseline.models) as Parameters<typeof scoreBenign>[0]);
    expect(now.images).toBeGreaterThan(300);
    expect(benignRegressions(baseline, now)).toEqual([]);
  }, 1_800_000);
});
