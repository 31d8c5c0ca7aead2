// The embedded composition through inject: the model it asks the process to load (a mounted policy's
// spec.model wins over MODEL, as in the detect service), and readiness off while it drains.

import { afterEach, describe, expect, it } from 'vitest';
import { drainFirst } from '../../lib/common/drain.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { policyMount, policyText } from '../../test/support/policy-mount.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe('buildEmbeddedApp', () => {
  it('loads MODEL without a policy file, and the policy file’s model when one is mounted', async () => {
    const plain = await embeddedApp({ env: { MODEL: 'inception_v3' } });
    cleanups.push(() => plain.app.close());
    expect(plain.modelToLoad).toBe('inception_v3');
    const mount = policyMount(policyText({ generation: 1, model: 'open_nsfw' }));
    cleanups.push(mount.remove);
    const withPolicy = await embeddedApp({ env: { MODEL: 'inception_v3', POLICY_FILE: mount.file } });
    cleanups.push(() => withPolicy.app.close());
    expect(withPolicy.modelToLoad).toBe('open_nsfw');
  });

  it('drains: readiness 503/5001 in the envelope, every answer closing its connection', async () => {
    const { app } = await embeddedApp();
    cleanups.push(() => app.close());
    await drainFirst(app, 0);
    const ready = await app.inject({ url: '/internal/ready' });
    expect({ status: ready.statusCode, body: ready.json() }).toEqual({
      status: 503,
      body: { code: 5001, message: 'Draining: shutting down' },
    });
    const health = await app.inject({ url: '/api/public/health' });
    expect(health.statusCode).toBe(200);
    expect(health.headers.connection).toBe('close');
  });
});
