import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { ApiError } from './errors.ts';
import { type ProbeChecks, registerProbes, unavailable } from './probes.ts';

async function probe(checks: ProbeChecks, path: string) {
  const app = Fastify();
  registerProbes(app, checks);
  const res = await app.inject({ url: path });
  await app.close();
  return { status: res.statusCode, body: res.json() as unknown };
}

describe('the probes', () => {
  it('answer 200 in the success envelope, with what the check adds', async () => {
    expect(await probe({}, '/internal/live')).toEqual({
      status: 200,
      body: { code: 0, message: 'ok', data: { status: 'ok' } },
    });
    expect(await probe({ ready: () => ({ model: 'mobilenet_v2' }) }, '/internal/ready')).toEqual({
      status: 200,
      body: { code: 0, message: 'ok', data: { status: 'ready', model: 'mobilenet_v2' } },
    });
  });

  it('answer 503/5001 with the reason a check gives', async () => {
    const stuck: ProbeChecks = {
      live: () => {
        throw unavailable('Scoring threads stuck; restart the process');
      },
    };
    expect(await probe(stuck, '/internal/live')).toEqual({
      status: 503,
      body: { code: 5001, message: 'Scoring threads stuck; restart the process' },
    });
    // A liveness failure leaves readiness alone.
    expect((await probe(stuck, '/internal/ready')).status).toBe(200);
  });

  it('answer 503/5001 for any other failure of a check, keeping an ApiError as it is', async () => {
    const failing = async () => {
      throw new Error('ECONNREFUSED');
    };
    expect(await probe({ ready: failing }, '/internal/ready')).toEqual({
      status: 503,
      body: { code: 5001, message: 'Not ready' },
    });
    const own = () => {
      throw new ApiError('UNAVAILABLE', 'Quota store unavailable; try again shortly');
    };
    expect(await probe({ ready: own }, '/internal/ready')).toEqual({
      status: 503,
      body: { code: 5001, message: 'Quota store unavailable; try again shortly' },
    });
  });
});
