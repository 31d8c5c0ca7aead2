// The detect service's composition through inject: its probes in the shared shape, the drain, and the
// model it asks the process to load (a mounted policy's spec.model wins over MODEL).

import { afterEach, describe, expect, it } from 'vitest';
import { drainFirst } from '../../lib/common/drain.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { policyMount, policyText } from '../../test/support/policy-mount.ts';
import { loadDetectConfig } from './config.ts';
import { InProcessScorer } from './scoring/image-scorer.ts';
import { ScorerSlot } from './scoring/scorer-slot.ts';
import { buildDetectService } from './service.ts';
import { DRAINING_HEADER } from './work-gate.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function service(env: Record<string, string> = {}, slot = new ScorerSlot()) {
  const built = await buildDetectService(loadDetectConfig(env), slot, { logger: false });
  cleanups.push(() => built.app.close());
  return built;
}

describe('buildDetectService', () => {
  it('is live at once, not ready before its model is loaded, and not ready while draining', async () => {
    const { app } = await service();
    const live = await app.inject({ url: '/internal/live' });
    expect(live.json()).toEqual({ code: 0, message: 'ok', data: { status: 'ok' } });
    const ready = await app.inject({ url: '/internal/ready' });
    expect({ status: ready.statusCode, body: ready.json() }).toEqual({
      status: 503,
      body: { code: 5001, message: 'Model not loaded' },
    });
    await drainFirst(app, 0);
    expect((await app.inject({ url: '/internal/ready' })).json()).toEqual({
      code: 5001,
      message: 'Draining: shutting down',
    });
  });

  it('once its gate is closed (SIGTERM, after the drain), answers a detect 503/5001 marked for the edge to retry on another pod', async () => {
    const slot = new ScorerSlot();
    slot.fill(new InProcessScorer(new FakeClassifier(), loadDetectConfig({}).limits));
    const { app, gate } = await service({}, slot);
    gate.close();
    const res = await app.inject({
      method: 'POST',
      url: '/api/public/detect',
      // As the edge passes it on after ext_authz (an anonymous caller).
      headers: { 'content-type': 'image/jpeg', 'x-account-id': '-', 'x-quota-tier': 'anonymous' },
      payload: Buffer.alloc(64),
    });
    expect({ status: res.statusCode, code: res.json().code }).toEqual({ status: 503, code: 5001 });
    expect(res.headers[DRAINING_HEADER], res.body).toBe('1');
    expect(res.headers['retry-after']).toBeDefined();
  });

  it('loads MODEL without a policy file, and the policy file’s model when one is mounted', async () => {
    expect((await service({ MODEL: 'inception_v3' })).modelToLoad).toBe('inception_v3');
    const mount = policyMount(policyText({ generation: 1, model: 'open_nsfw' }));
    cleanups.push(mount.remove);
    expect((await service({ MODEL: 'inception_v3', POLICY_FILE: mount.file })).modelToLoad).toBe('open_nsfw');
  });
});
