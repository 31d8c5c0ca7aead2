// Known-bad images matched on the real stack (`npm run stack`'s startStack: Envoy with the chart's
// configuration, ext_authz to the quota service on a real redis-server, the detect server with the real
// model and PDQ_HASHES at its default, auto: no image hashed until a list is in force): a list imported
// with the admin CLI (a process of its own, into the detect
// server's HASH_LISTS_FILE) is matched through the edge without a restart — an image listed from a
// re-encoded, resized copy, and a rotated copy — the decision raised to block, another image not;
// a malformed import changes nothing; `rm` stops the matching.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import sharp from 'sharp';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ROOT, type Stack, startStack } from '../../tools/stack/stack.ts';
import { childEnv } from '../support/children.ts';
import { eventually } from '../support/eventually.ts';
import { LISTED_PHOTO, listedCopyHash, UNLISTED_PHOTO } from '../support/listed-photo.ts';
import { get, post } from '../support/stack-client.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

const execFileAsync = promisify(execFile);
const PHOTO = LISTED_PHOTO;
const OTHER = UNLISTED_PHOTO;

describeWithStackTools(
  'hash lists on the cluster stack through Envoy',
  ['helm', 'envoy', 'jaeger'],
  { redis: true },
  () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hash-lists-stack-'));
    const env = {
      HASH_LISTS_FILE: path.join(dir, 'hash-lists.db'),
      HASH_LISTS_RELOAD_SECONDS: '1',
      ANON_PER_MINUTE: '100000',
      ANON_PER_DAY: '1000000',
    };
    let stack: Stack;
    /** The photo's decision by its score alone (the model's), before any list. */
    let scored: string;

    /** The admin CLI as an operator runs it (`npm run admin -- hash-list …`): exit code and output. */
    const admin = async (...args: string[]) =>
      await execFileAsync('npm', ['run', '--silent', 'admin', '--', 'hash-list', ...args], {
        cwd: ROOT,
        env: { ...process.env, ...env },
      }).then(
        ({ stdout }) => ({ code: 0, out: stdout }),
        (err: { code: number; stdout: string; stderr: string }) => ({
          code: err.code,
          out: `${err.stdout}${err.stderr}`,
        }),
      );
    const detect = async (image: Buffer) => {
      const a = await post(stack.edgeUrl, '/api/public/detect', { body: image });
      expect(a.status).toBe(200);
      return a.body.data as {
        matches: Array<{ list: string; distance: number; action: string }>;
        decision: string;
        image: { pdq?: string };
      };
    };

    beforeAll(async () => {
      stack = await startStack({ port: 0, env: childEnv({ ...process.env, ...env, LOG_LEVEL: 'info' }) });
    }, 300_000);
    afterAll(async () => {
      await stack?.stop();
      rmSync(dir, { recursive: true, force: true });
    }, 60_000);

    it('matches a listed image (re-encoded, resized, rotated) through the edge, raising the decision; another image does not', async () => {
      const before = await detect(PHOTO);
      expect(before.matches).toEqual([]);
      expect(before.image.pdq).toBeUndefined();
      scored = before.decision;
      expect(scored).not.toBe('block');
      const file = path.join(dir, 'known.txt');
      writeFileSync(file, `# known-bad\n${await listedCopyHash()}\n${'ab'.repeat(32)}\n`);
      expect((await admin('import', 'partner', file, '--action', 'block')).code).toBe(0);
      const data = await eventually('the list in force behind the edge', async () => {
        const d = await detect(PHOTO);
        return d.matches.length > 0 ? d : undefined;
      });
      expect(data.matches).toEqual([{ list: 'partner', distance: expect.any(Number), action: 'block' }]);
      expect(data.matches[0]?.distance).toBeLessThanOrEqual(31);
      expect(data.decision).toBe('block');
      expect(data.image.pdq).toMatch(/^[0-9a-f]{64}$/);
      const rotated = await sharp(PHOTO).rotate(90).jpeg({ quality: 85 }).toBuffer();
      expect((await detect(rotated)).matches.map((m) => m.list)).toEqual(['partner']);
      expect((await detect(OTHER)).matches).toEqual([]);
      // The lists stay the operators': what detect reports to the operator is not routed by the edge.
      expect((await get(stack.edgeUrl, '/internal/hash-lists')).status).toBe(404);
    }, 120_000);

    it('a malformed import changes nothing; rm stops the matching without a restart', async () => {
      const bad = path.join(dir, 'bad.txt');
      writeFileSync(bad, `${'cd'.repeat(32)}\nnot a hash\n`);
      const refused = await admin('import', 'partner', bad);
      expect(refused.code).not.toBe(0);
      expect(refused.out).toContain('line 2');
      // Two polls later the list is still the one imported before.
      await new Promise((r) => setTimeout(r, 2_500));
      expect((await detect(PHOTO)).decision).toBe('block');
      const pid = stack.child('detect').pid;
      expect((await admin('rm', 'partner')).code).toBe(0);
      await eventually('the list gone behind the edge', async () =>
        (await detect(PHOTO)).matches.length === 0 ? true : undefined,
      );
      const after = await detect(PHOTO);
      expect(after.decision).toBe(scored);
      // No list in force: auto hashes nothing again.
      expect(after.image.pdq).toBeUndefined();
      expect(stack.child('detect').pid).toBe(pid);
    }, 120_000);
  },
);
