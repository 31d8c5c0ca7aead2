// Known-bad images matched in the answer, embedded: a list imported with the admin command (the real
// one, into a real HASH_LISTS_FILE) is in force in a running app without a restart; an image listed from
// a re-encoded, resized copy matches, so does a rotated copy, another image does not; the list's action
// raises the decision whatever the score; a malformed import changes nothing; `rm` stops the matching.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { eventually } from '../../test/support/eventually.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { LISTED_PHOTO, listedCopyHash, UNLISTED_PHOTO } from '../../test/support/listed-photo.ts';
import { runHashListCommand } from '../admin/hash-list-command.ts';
import { fileSource, loadHashListConfig } from './hash-lists.ts';
import { withMatches } from './result.ts';

const PHOTO = LISTED_PHOTO;
const OTHER = UNLISTED_PHOTO;

/**
 * An embedded app over a lists file of its own (in a fresh directory, removed afterwards), the admin
 * command on that file, and a detect call that expects a 200.
 */
function appWithLists(prefix: string, settings: Record<string, string> = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  const env = {
    ...settings,
    HASH_LISTS_FILE: path.join(dir, 'hash-lists.db'),
    HASH_LISTS_RELOAD_SECONDS: '1',
  };
  let app: Awaited<ReturnType<typeof embeddedApp>>['app'];

  beforeAll(async () => {
    // The command's own output is not what is under test.
    vi.spyOn(console, 'log').mockImplementation(() => {});
    vi.spyOn(console, 'error').mockImplementation(() => {});
    ({ app } = await embeddedApp({ env, classifier: new FakeClassifier() }));
  });

  afterAll(async () => {
    await app?.close();
    vi.restoreAllMocks();
    rmSync(dir, { recursive: true, force: true });
  });

  return {
    dir,
    admin: (...argv: string[]) => runHashListCommand(argv, { ...process.env, ...env }),
    detect: async (bytes: Buffer) => {
      const res = await app.inject({
        method: 'POST',
        url: '/api/public/detect',
        payload: bytes,
        headers: { 'content-type': 'image/jpeg' },
      });
      expect(res.statusCode).toBe(200);
      return res.json().data;
    },
  };
}

describe('hash lists in the detect answer (embedded)', () => {
  const { dir, admin, detect } = appWithLists('hash-lists-', { PDQ_HASHES: 'on' });

  it('answers no match while no list is in force', async () => {
    const data = await detect(PHOTO);
    expect(data.matches).toEqual([]);
    expect(data.decision).toBe('allow');
    expect(data.image.pdq).toMatch(/^[0-9a-f]{64}$/);
    expect(data.image.pdq_quality).toBe(100);
  });

  it('matches an image listed from a re-encoded, resized copy, and raises the decision to block', async () => {
    const file = path.join(dir, 'known.txt');
    writeFileSync(file, `# known-bad, from a partner\n${await listedCopyHash()}\n${'ab'.repeat(32)}\n`);
    expect(admin('import', 'partner', file)).toBe(0);
    const data = await eventually('the list in force', async () => {
      const d = await detect(PHOTO);
      return d.matches.length > 0 ? d : undefined;
    });
    expect(data.matches).toEqual([{ list: 'partner', distance: expect.any(Number), action: 'block' }]);
    expect(data.matches[0].distance).toBeLessThanOrEqual(31);
    // The score stays the model's (neutral); the decision is the list's.
    expect(data.scores.nsfw).toBe(0);
    expect(data.decision).toBe('block');
  });

  it('matches a rotated and a mirrored copy, and not another image', async () => {
    for (const copy of [
      await sharp(PHOTO).rotate(90).jpeg().toBuffer(),
      await sharp(PHOTO).flop().jpeg().toBuffer(),
    ]) {
      const data = await detect(copy);
      expect(data.matches).toMatchObject([{ list: 'partner', action: 'block' }]);
      expect(data.matches[0].distance).toBeLessThanOrEqual(31);
    }
    const other = await detect(OTHER);
    expect(other.matches).toEqual([]);
    expect(other.decision).toBe('allow');
  });

  it('a review list matches beside it; the strongest action decides, a review match raises allow to review', async () => {
    const file = path.join(dir, 'review.txt');
    writeFileSync(file, `${await listedCopyHash()}\n`);
    expect(admin('import', 'watch', file, '--action', 'review', '--max-distance', '40')).toBe(0);
    const data = await eventually('both lists in force', async () => {
      const d = await detect(PHOTO);
      return d.matches.length === 2 ? d : undefined;
    });
    expect(data.matches.map((m: { list: string; action: string }) => [m.list, m.action])).toEqual([
      ['partner', 'block'],
      ['watch', 'review'],
    ]);
    expect(data.decision).toBe('block');
    const review = { list: 'watch', distance: 3, action: 'review' } as const;
    expect(withMatches('allow', [review])).toBe('review');
    expect(withMatches('block', [review])).toBe('block');
  });

  it('refuses a malformed import whole, naming the line, and leaves the list as it was', async () => {
    const file = path.join(dir, 'broken.txt');
    writeFileSync(file, `${'cd'.repeat(32)}\n# fine so far\nnot a hash\n`);
    const errors = vi.mocked(console.error);
    errors.mockClear();
    expect(admin('import', 'partner', file)).toBe(1);
    expect(errors.mock.calls.flat().join(' ')).toMatch(/line 3: .*partner not changed/);
    const log = vi.mocked(console.log);
    log.mockClear();
    expect(admin('ls', '--json')).toBe(0);
    const { lists } = JSON.parse(String(log.mock.calls[0]?.[0]));
    expect(lists.find((l: { name: string }) => l.name === 'partner')).toMatchObject({
      count: 2,
      action: 'block',
    });
    expect((await detect(PHOTO)).decision).toBe('block');
  });

  it('stops matching once the list is removed, without a restart', async () => {
    expect(admin('rm', 'partner')).toBe(0);
    expect(admin('rm', 'watch')).toBe(0);
    expect(admin('rm', 'watch')).toBe(1);
    const data = await eventually('the lists gone', async () => {
      const d = await detect(PHOTO);
      return d.matches.length === 0 ? d : undefined;
    });
    expect(data.decision).toBe('allow');
  });
});

describe('PDQ_HASHES=auto (the default): an image is hashed only while a list is in force', () => {
  const { dir, admin, detect } = appWithLists('hash-lists-auto-');

  it('no hash while no list is in force; hashed and matched from a list import on; no hash once it is removed', async () => {
    const before = await detect(PHOTO);
    expect(before.image.pdq).toBeUndefined();
    expect(before.matches).toEqual([]);
    const file = path.join(dir, 'known.txt');
    writeFileSync(file, `${await listedCopyHash()}\n`);
    expect(admin('import', 'partner', file)).toBe(0);
    const listed = await eventually('the list in force', async () => {
      const d = await detect(PHOTO);
      return d.matches.length > 0 ? d : undefined;
    });
    expect(listed.image.pdq).toMatch(/^[0-9a-f]{64}$/);
    expect(listed.decision).toBe('block');
    // Every image is hashed while a list is in force, matched or not.
    expect((await detect(OTHER)).image.pdq).toMatch(/^[0-9a-f]{64}$/);
    expect(admin('rm', 'partner')).toBe(0);
    const after = await eventually('the list gone', async () => {
      const d = await detect(PHOTO);
      return d.image.pdq === undefined ? d : undefined;
    });
    expect(after.matches).toEqual([]);
    expect(after.decision).toBe('allow');
  });
});

describe('the embedded lists file as a source', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'hash-lists-source-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('has no generation while no file exists, and fails (for the poller to log) on one it cannot read', async () => {
    const file = path.join(dir, 'hash-lists.db');
    const source = fileSource(file);
    await expect(source.generation()).resolves.toBeUndefined();
    writeFileSync(file, 'not an SQLite database, ten times over. '.repeat(10));
    await expect(source.generation()).rejects.toThrow();
    await source.close();
  });
});

describe('PDQ_HASHES', () => {
  it('is auto by default (lists loaded, an image hashed while one is in force), on or off when set so, and a value it does not know fails the configuration', () => {
    expect(loadHashListConfig({})).toMatchObject({ enabled: true, always: false });
    expect(loadHashListConfig({ PDQ_HASHES: 'on' })).toMatchObject({ enabled: true, always: true });
    expect(loadHashListConfig({ PDQ_HASHES: 'off' })).toMatchObject({ enabled: false, always: false });
    expect(() => loadHashListConfig({ PDQ_HASHES: 'yes' })).toThrow(/PDQ_HASHES/);
  });
});
