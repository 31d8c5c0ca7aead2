// The benign corpus: real photographs (and photographic cut-outs) that no model should block, taken
// from Debian packages with clear licences, each pinned by version and the sha256 of its .deb. Fetched
// with `apt-get download` into a cache outside the repository (BENIGN_CACHE, default
// ~/.cache/nsfwdetector-benign; nothing is committed), checked, unpacked with dpkg-deb, and listed by
// each source's own rule. docs/models.md, "False blocks on real photographs", gives the shares.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { walk } from './walk.ts';

export interface BenignSource {
  package: string;
  version: string;
  /** sha256 of the .deb as the Debian archive serves it. */
  sha256: string;
  licence: string;
  /** What it holds, for the source list. */
  what: string;
  /** Files taken: a path (inside the unpacked package) matching `include` and not `exclude`. */
  include: RegExp;
  exclude?: RegExp;
}

const PICTURE = /\.(jpe?g|png|webp)$/i;

export const BENIGN_SOURCES: readonly BenignSource[] = [
  {
    package: 'lomiri-wallpapers-16.04',
    version: '20.04.0-2',
    sha256: 'a99ff6a3bfe451e4cc0682ecb3cc82e71740626d59e4845ae34a0a0e45421eab',
    licence: 'CC-BY-4.0, CC-BY-SA-3.0/4.0, CC0-1.0',
    what: 'photographs from Ubuntu’s wallpaper contests (landscapes, animals, people)',
    include: /\/backgrounds\/.*\.jpe?g$/i,
  },
  {
    package: 'lomiri-wallpapers-20.04',
    version: '20.04.0-2',
    sha256: 'd44e89b8473aafe64a5b678f014862dc31335aaaf18665c544d985d854f1a709',
    licence: 'CC-BY-4.0, CC-BY-SA-3.0/4.0, CC0-1.0',
    what: 'photographs from Ubuntu’s wallpaper contests',
    include: /\/backgrounds\/.*\.jpe?g$/i,
  },
  {
    package: 'ukui-wallpapers',
    version: '20.04.3-1.1',
    sha256: '6d49be70152e6d603163458e177e501deb0be8f2916389ccbfcf59b0d7fc0262',
    licence: 'CC-BY-SA-3.0',
    what: 'Ubuntu Kylin wallpapers (photographs and a few artworks)',
    include: PICTURE,
    exclude: /\/(icons|pixmaps)\//,
  },
  {
    package: 'mate-backgrounds',
    version: '1.26.0-1',
    sha256: '7bf4c2209f34b4f61ba6d24c8b58c28b361e82e4b943aae6d42c030169af9e04',
    licence: 'GPL-2+, CC-BY-SA-4.0',
    what: 'MATE’s nature photographs',
    include: /\/nature\/.*\.jpe?g$/i,
  },
  {
    package: 'opencv-doc',
    version: '4.6.0+dfsg-12',
    sha256: '4b12681df35878207ac7097dc66184b2ae552e4bf4ddd2af04a0f03ed0b8682a',
    licence: 'Apache-2.0, BSD-3-Clause',
    what: 'OpenCV’s sample photographs (people, fruit, buildings, stereo pairs)',
    include: /\/examples\/data\/[^/]+\.jpe?g$/i,
  },
  {
    package: 'tuxpaint-stamps-default',
    version: '2022.06.04-1',
    sha256: '6db6c1bfc870a47f1499d6203b083522eacb57c5f9c87d468f2e92eb6d9d5f34',
    licence: 'GPL-2',
    what: 'Tux Paint’s photographic stamps (animals, food, plants, clothes, vehicles; on transparency)',
    include:
      /\/stamps\/(animals|food|plants|clothes|household|vehicles|sports|hobbies|town\/monuments|space|medical|military)\/.*\.png$/i,
    exclude: /cartoon|_mirror|_flip|thumb/i,
  },
];

export const benignCacheDir = (env: NodeJS.ProcessEnv = process.env): string =>
  env.BENIGN_CACHE ?? path.join(homedir(), '.cache', 'nsfwdetector-benign');

const sha256Of = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

/** The source unpacked in the cache (downloaded and checked first if it is not there yet). */
export function unpackedSource(source: BenignSource, cache = benignCacheDir()): string {
  const name = `${source.package}_${source.version}`;
  const dir = path.join(cache, name);
  if (existsSync(path.join(dir, '.complete'))) return dir;
  const debs = path.join(cache, 'debs');
  mkdirSync(debs, { recursive: true });
  const deb = path.join(debs, `${source.package}_${source.version.replace(/^\d+:/, '')}_all.deb`);
  if (!existsSync(deb) || sha256Of(deb) !== source.sha256) {
    rmSync(deb, { force: true });
    const download = () =>
      execFileSync('apt-get', ['download', `${source.package}=${source.version}`], {
        cwd: debs,
        stdio: 'inherit',
      });
    try {
      download();
    } catch {
      // A machine whose package lists were never fetched (a fresh one) knows no version yet.
      execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
      download();
    }
  }
  const got = sha256Of(deb);
  if (got !== source.sha256) {
    throw new Error(`${path.basename(deb)}: sha256 ${got}, expected ${source.sha256}`);
  }
  const partial = `${dir}.partial`;
  rmSync(partial, { recursive: true, force: true });
  execFileSync('dpkg-deb', ['-x', deb, partial]);
  writeFileSync(path.join(partial, '.complete'), `${source.sha256}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(partial, dir);
  return dir;
}

export interface BenignImage {
  source: string;
  file: string;
}

/** Every image of the benign corpus, in a stable order, fetching what the cache lacks. */
export async function benignImages(cache = benignCacheDir()): Promise<BenignImage[]> {
  const images: BenignImage[] = [];
  for (const source of BENIGN_SOURCES) {
    const dir = unpackedSource(source, cache);
    for await (const file of walk(dir)) {
      if (source.include.test(file) && !source.exclude?.test(file))
        images.push({ source: source.package, file });
    }
  }
  return images;
}
