// SIGTERM, the same way in every server process (lib/common/boot.ts): each runs as a real process
// (its thin server.ts through tsx) with a drain period (SHUTDOWN_DELAY_MS) inside its grace
// (SHUTDOWN_GRACE_MS). A request is in flight (its body half sent) when the signal comes; readiness
// then answers 503 in the error table's envelope while the server still serves; the request in flight
// is answered, closing its connection; the process exits 0 (past its grace it would exit 1).
// The embedded server also loads the model a mounted policy file names, as the detect service does.
// A drain no shorter than the grace (it would end every shutdown in exit 1) stops each process at boot.
// The operator's SIGTERM is tested against a real API server: test/operator/operator-shutdown.test.ts.

import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { headInFlight } from './support/held-request.ts';
import { policyMount, policyText } from './support/policy-mount.ts';
import {
  type ServerProcess,
  spawnService,
  startClusterService,
  startServer,
  waitForStatus,
} from './support/server-process.ts';

const DRAIN = { SHUTDOWN_DELAY_MS: '3000', SHUTDOWN_GRACE_MS: '20000' };
const JPEG = readFileSync(fixture('320x240.jpg'));
/** The identity Envoy adds in front of detect (no EDGE_SECRET configured here). */
const EDGE = { 'x-account-id': '-', 'x-quota-tier': 'anonymous' };

const started: ServerProcess[] = [];
const cleanups: Array<() => void> = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
  for (const cleanup of cleanups) cleanup();
});
const keep = (server: ServerProcess) => {
  started.push(server);
  return server;
};

interface Answer {
  status: number;
  connection: string;
  body: string;
}

/** A request whose body is half sent: in flight until `finish`. */
function inFlight(url: string, headers: Record<string, string>, body: Buffer) {
  const req = request(url, {
    method: 'POST',
    headers: { ...headers, 'content-length': String(body.length) },
  });
  const answered = new Promise<Answer>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, connection: res.headers.connection ?? '', body: text }),
      );
    });
    req.on('error', reject);
  });
  // Awaited by `finish`; a failure before then must not count as unhandled.
  answered.catch(() => undefined);
  const half = body.length >> 1;
  req.write(body.subarray(0, half));
  return {
    finish: () => {
      req.end(body.subarray(half));
      return answered;
    },
  };
}

/** Polls readiness until it is not 200; returns that answer. */
async function readinessAfterSigterm(server: ServerProcess): Promise<{ status: number; body: unknown }> {
  for (;;) {
    if (server.proc.exitCode !== null)
      throw new Error(`exited before readiness went off:\n${server.output()}`);
    const res = await fetch(`${server.url}/internal/ready`);
    if (res.status !== 200) return { status: res.status, body: await res.json() };
    await res.arrayBuffer();
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The scenario every server process passes; `expected` is the in-flight request's status. */
async function drainsOnSigterm(
  server: ServerProcess,
  hold: { path: string; headers?: Record<string, string>; body?: Buffer },
  expected: number,
) {
  const request = hold.body
    ? inFlight(`${server.url}${hold.path}`, hold.headers ?? {}, hold.body)
    : headInFlight(server.url, hold.path);
  // Time for the half body to reach the server, so that the request is under way when the signal comes.
  await new Promise((r) => setTimeout(r, 300));
  server.proc.kill('SIGTERM');
  expect(await readinessAfterSigterm(server)).toEqual({
    status: 503,
    body: { code: 5001, message: 'Draining: shutting down' },
  });
  const answer = await request.finish();
  expect(answer.status, answer.body).toBe(expected);
  expect(answer.connection).toBe('close');
  expect(await server.exited).toBe(0);
  return answer;
}

describe('SIGTERM: readiness off, the request in flight answered, exit 0', () => {
  it('the embedded server (npm start), which loads the policy file’s model', async () => {
    // The policy names another model than MODEL (mobilenet_v2 by default): the file wins, as in detect.
    const mount = policyMount(policyText({ generation: 1, model: 'open_nsfw' }));
    cleanups.push(mount.remove);
    const server = keep(await startServer({ ...DRAIN, POLICY_FILE: mount.file }));
    const ready = (await (await fetch(`${server.url}/internal/ready`)).json()) as { data: { model: string } };
    expect(ready.data.model).toBe('open_nsfw');
    expect(server.output()).toContain('(model open_nsfw loaded, workers warm)');
    const answer = await drainsOnSigterm(
      server,
      { path: '/api/public/detect', headers: { 'content-type': 'image/jpeg' }, body: JPEG },
      200,
    );
    expect(JSON.parse(answer.body)).toMatchObject({ code: 0, data: { image: { format: 'jpeg' } } });
  }, 180_000);

  it('the detect service', async () => {
    const server = keep(await startClusterService('detect', { env: DRAIN }));
    await waitForStatus(server, '/internal/ready', 200);
    const answer = await drainsOnSigterm(
      server,
      { path: '/api/public/detect', headers: { ...EDGE, 'content-type': 'image/jpeg' }, body: JPEG },
      200,
    );
    expect(JSON.parse(answer.body)).toMatchObject({ code: 0, data: { image: { format: 'jpeg' } } });
  }, 180_000);

  it('the quota service', async () => {
    const server = keep(await startClusterService('quota', { env: DRAIN, waitFor: 'ready' }));
    await drainsOnSigterm(
      server,
      {
        path: '/ext_authz/api/public/detect',
        headers: { 'content-type': 'application/octet-stream' },
        body: Buffer.from('0123456789'),
      },
      200,
    );
  }, 60_000);

  it('the health service', async () => {
    const server = keep(await startClusterService('health', { env: DRAIN, waitFor: 'ready' }));
    // Health has no route that reads a body: the request in flight is a GET whose head is half sent.
    const answer = await drainsOnSigterm(server, { path: '/api/public/health' }, 200);
    expect(JSON.parse(answer.body)).toMatchObject({ code: 0, data: { status: 'ok' } });
  }, 60_000);
});

describe('a drain not shorter than the grace: refused at boot, one line naming both, exit 2', () => {
  const entries: Array<[string, string, string]> = [
    ['nsfwdetector', 'services/all-in-one/server.ts', 'PORT'],
    ['nsfwdetector detect', 'services/detect/server.ts', 'DETECT_PORT'],
    ['nsfwdetector quota', 'services/quota/server.ts', 'QUOTA_PORT'],
    ['nsfwdetector health', 'services/health/server.ts', 'HEALTH_PORT'],
    ['nsfwdetector operator', 'services/operator/main.ts', 'OPERATOR_METRICS_PORT'],
  ];
  it.each(entries)(
    '%s',
    async (who, entry, portVar) => {
      const server = keep(
        await spawnService({
          entry,
          portVar,
          waitFor: 'nothing',
          env: { SHUTDOWN_DELAY_MS: '3000', SHUTDOWN_GRACE_MS: '3000' },
        }),
      );
      expect(await server.exited).toBe(2);
      expect(server.output().trim()).toBe(
        `${who}: invalid configuration: SHUTDOWN_DELAY_MS must be less than SHUTDOWN_GRACE_MS (the drain is part of the grace period), got 3000 and 3000`,
      );
    },
    60_000,
  );
});
