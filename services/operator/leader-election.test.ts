// stop() against a renewal under way, on a fake Lease API that keeps the API server's optimistic
// concurrency (a write carrying a stale resourceVersion is a 409). The real API server runs the
// election in test/operator/operator.test.ts and its release in test/operator/operator-shutdown.test.ts.

import type { CoordinationV1Api, V1Lease } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { LeaderElection } from './leader-election.ts';

/** One Lease; `holdWrites` makes every replace wait until `releaseWrites()`. */
function fakeLeaseApi() {
  let lease: V1Lease | undefined;
  let version = 0;
  let gate: Promise<void> | undefined;
  let open: (() => void) | undefined;
  const conflict = () => Object.assign(new Error('Conflict'), { code: 409 });
  const copy = (l: V1Lease) => structuredClone(l);
  const api = {
    readNamespacedLease: async () => {
      if (!lease) throw Object.assign(new Error('Not Found'), { code: 404 });
      return copy(lease);
    },
    createNamespacedLease: async ({ body }: { body: V1Lease }) => {
      if (lease) throw conflict();
      version += 1;
      lease = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(version) } };
      return copy(lease);
    },
    replaceNamespacedLease: async ({ body }: { body: V1Lease }) => {
      await gate;
      if (body.metadata?.resourceVersion !== lease?.metadata?.resourceVersion) throw conflict();
      version += 1;
      lease = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(version) } };
      return copy(lease);
    },
  };
  return {
    api: api as unknown as CoordinationV1Api,
    holder: () => lease?.spec?.holderIdentity,
    holdWrites: () => {
      gate = new Promise((r) => {
        open = r;
      });
    },
    releaseWrites: () => {
      gate = undefined;
      open?.();
    },
  };
}

const until = async (what: string, check: () => boolean) => {
  for (let i = 0; i < 200; i++) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`${what}: not within 1 s`);
};

/** An election of identity `a` on `api`, logging into `logged`. */
const electionOn = (
  api: CoordinationV1Api,
  logged: Array<[string, object | undefined]>,
  more: { retryPeriodMs: number; onStartedLeading?: () => void },
) =>
  new LeaderElection({
    api,
    namespace: 'ns',
    name: 'lease',
    identity: 'a',
    leaseDurationSeconds: 15,
    renewDeadlineMs: 10_000,
    onStartedLeading: () => undefined,
    onStoppedLeading: () => undefined,
    log: (msg, obj) => logged.push([msg, obj]),
    ...more,
  });

describe('LeaderElection.stop', () => {
  it('releases the Lease when a renewal is under way (its write lands between the release read and write)', async () => {
    const fake = fakeLeaseApi();
    const logged: Array<[string, object | undefined]> = [];
    let started = 0;
    const election = electionOn(fake.api, logged, {
      retryPeriodMs: 20,
      onStartedLeading: () => {
        started += 1;
      },
    });
    election.start();
    await until('leading', () => election.leading);
    // The next renewal reads the Lease and waits on its write; stop() comes meanwhile.
    fake.holdWrites();
    await new Promise((r) => setTimeout(r, 60));
    const stopped = election.stop();
    await new Promise((r) => setTimeout(r, 20));
    fake.releaseWrites();
    await stopped;
    expect(fake.holder()).toBe('');
    expect(election.leading).toBe(false);
    expect(started).toBe(1);
    expect(logged.map(([msg]) => msg)).not.toContain('lease not released');
  });

  it('says so in the log when the Lease cannot be released', async () => {
    const fake = fakeLeaseApi();
    const logged: Array<[string, object | undefined]> = [];
    const election = electionOn(fake.api, logged, { retryPeriodMs: 1_000 });
    election.start();
    await until('leading', () => election.leading);
    (fake.api as unknown as { replaceNamespacedLease: () => Promise<never> }).replaceNamespacedLease =
      async () => {
        throw Object.assign(new Error('Service Unavailable'), { code: 503 });
      };
    await election.stop();
    expect(fake.holder()).toBe('a');
    expect(logged).toContainEqual(['lease not released', { err: 'Service Unavailable', identity: 'a' }]);
  });
});
