// Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it: the holder
// renews spec.renewTime every retry period; a candidate takes the Lease over only when it has not been
// renewed for leaseDurationSeconds. Every write carries the read resourceVersion, so two candidates
// racing for an expired Lease cannot both win (the loser gets 409 Conflict).
// A leader that cannot reach the API server (restarted, network) keeps leading until its renew deadline
// (shorter than the Lease, counted from the start of its last successful renewal, so it stops before
// any standby may take over), then steps down and stays a candidate: when the API server answers
// again it re-takes its own Lease, or follows whoever took it.

import { type CoordinationV1Api, type V1Lease, V1MicroTime } from '@kubernetes/client-node';

export interface LeaderElectionOptions {
  api: CoordinationV1Api;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationSeconds: number;
  /** How long a leader keeps leading without a successful renewal (client-go: RenewDeadline). */
  renewDeadlineMs: number;
  retryPeriodMs: number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  log: (msg: string, obj?: object) => void;
}

function status(err: unknown): number | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/** The promise's outcome, or a rejection after `ms` (the promise itself runs on, ignored). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from the API server within ${ms} ms`)), ms);
  });
  promise.catch(() => undefined);
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export class LeaderElection {
  #leading = false;
  #renewedAt = 0;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  /** The tick under way: stop() waits for it, as its write would race the release. */
  #ticking: Promise<void> = Promise.resolve();

  constructor(readonly opts: LeaderElectionOptions) {}

  get leading(): boolean {
    return this.#leading;
  }

  start(): void {
    this.#ticking = this.#tick();
  }

  async #tick(): Promise<void> {
    if (this.#stopped) return;
    const attempt = Date.now();
    try {
      // Bounded like client-go's renew: a request that hangs must not keep a leader past its deadline.
      const held = await within(this.#tryAcquireOrRenew(), this.opts.renewDeadlineMs);
      if (held) this.#renewedAt = attempt;
      if (held && !this.#leading) {
        this.#leading = true;
        // Won while stopping: held only to be released by stop(), no term started.
        if (!this.#stopped) {
          this.opts.log('became leader', { identity: this.opts.identity });
          this.opts.onStartedLeading();
        }
      } else if (!held && this.#leading) this.#lose();
    } catch (err) {
      const sinceRenewal = Date.now() - this.#renewedAt;
      this.opts.log('lease error', { err: (err as Error).message, leading: this.#leading, sinceRenewal });
      if (this.#leading && sinceRenewal >= this.opts.renewDeadlineMs) this.#lose();
    }
    if (!this.#stopped)
      this.#timer = setTimeout(() => {
        this.#ticking = this.#tick();
      }, this.opts.retryPeriodMs);
  }

  #lose(): void {
    this.#leading = false;
    this.opts.log('lost leadership', { identity: this.opts.identity });
    this.opts.onStoppedLeading();
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const { api, namespace, name, identity, leaseDurationSeconds } = this.opts;
    // MicroTime: the API server refuses a plain Date's millisecond form for Lease times.
    const now = new V1MicroTime();
    let lease: V1Lease;
    try {
      lease = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (status(err) !== 404) throw err;
      try {
        await api.createNamespacedLease({
          namespace,
          body: {
            metadata: { name, namespace },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds,
              acquireTime: now,
              renewTime: now,
              leaseTransitions: 0,
            },
          },
        });
        return true;
      } catch (e) {
        if (status(e) === 409) return false;
        throw e;
      }
    }
    const spec = lease.spec ?? {};
    const renewed = spec.renewTime ? new Date(spec.renewTime).getTime() : 0;
    const duration = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
    const mine = spec.holderIdentity === identity;
    if (!mine && spec.holderIdentity && renewed + duration > now.getTime()) return false;
    lease.spec = {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds,
      renewTime: now,
      ...(mine ? {} : { acquireTime: now, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
    };
    try {
      await api.replaceNamespacedLease({ name, namespace, body: lease });
      return true;
    } catch (err) {
      if (status(err) === 409) return false;
      throw err;
    }
  }

  /** Stops renewing and, when leading, releases the Lease so a standby takes over at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    // A renewal written after the release's read would make its write a 409 and leave the Lease ours.
    await this.#ticking;
    if (!this.#leading) return;
    this.#leading = false;
    const { api, name, namespace, identity } = this.opts;
    for (let attempt = 1; ; attempt++) {
      try {
        const lease = await api.readNamespacedLease({ name, namespace });
        if (lease.spec?.holderIdentity !== identity) return;
        lease.spec.holderIdentity = '';
        await api.replaceNamespacedLease({ name, namespace, body: lease });
        return;
      } catch (err) {
        // Written since the read (a standby's attempt on an expired Lease): read it again.
        if (status(err) === 409 && attempt < 3) continue;
        // Not fatal: a standby takes over once the Lease expires (leaseDurationSeconds), not at once.
        this.opts.log('lease not released', { err: (err as Error).message, identity });
        return;
      }
    }
  }
}
