// A level-triggered work queue: keys (namespace/name), deduplicated while waiting, one worker per key at a
// time, failed keys retried with exponential backoff (per key, capped), successes forget their backoff.
// The reconciler reads the current state for the key, so a key queued ten times is reconciled once.

export class WorkQueue {
  readonly #waiting = new Set<string>();
  readonly #active = new Set<string>();
  readonly #dirty = new Set<string>();
  readonly #failures = new Map<string, number>();
  readonly #timers = new Set<NodeJS.Timeout>();
  #closed = false;
  #idle: Array<() => void> = [];

  constructor(
    readonly work: (key: string) => Promise<void>,
    readonly onError: (key: string, err: unknown, retryInMs: number) => void,
    readonly baseDelayMs = 200,
    readonly maxDelayMs = 30_000,
  ) {}

  get depth(): number {
    return this.#waiting.size + this.#dirty.size;
  }

  add(key: string): void {
    if (this.#closed) return;
    if (this.#active.has(key)) {
      this.#dirty.add(key);
      return;
    }
    if (this.#waiting.has(key)) return;
    this.#waiting.add(key);
    queueMicrotask(() => void this.#run(key));
  }

  addAfter(key: string, ms: number): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.add(key);
    }, ms);
    this.#timers.add(timer);
  }

  async #run(key: string): Promise<void> {
    if (!this.#waiting.delete(key) || this.#closed) return this.#settle();
    this.#active.add(key);
    try {
      await this.work(key);
      this.#failures.delete(key);
    } catch (err) {
      const n = (this.#failures.get(key) ?? 0) + 1;
      this.#failures.set(key, n);
      const delay = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (n - 1));
      this.onError(key, err, delay);
      this.addAfter(key, delay);
    } finally {
      this.#active.delete(key);
      if (this.#dirty.delete(key)) this.add(key);
      this.#settle();
    }
  }

  #settle(): void {
    if (this.#active.size === 0) for (const f of this.#idle.splice(0)) f();
  }

  /** Stops taking work and waits for the reconciles in progress (graceful shutdown). */
  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.#waiting.clear();
    this.#dirty.clear();
    if (this.#active.size > 0) await new Promise<void>((r) => this.#idle.push(r));
  }
}
