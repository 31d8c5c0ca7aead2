// Refusals in the logs, counted instead of written one by one. A refusal (401, 429, 503 overload …)
// is the service doing its job, not a fault: under a flood, one line per refusal would write
// megabytes a second and bury the faults. So each process keeps counts by code and writes one
// summary line per interval (warn if it holds a 5xx refusal, else info), with no stack, at most one
// sample message per code. A 5xx refusal that wraps a fault (a Redis error, a dead scoring worker)
// also logs that fault at error with its stack — once per code and interval, not once per request.
// Unexpected exceptions are not refusals: the error handler logs each at error, with its stack.

import type { FastifyBaseLogger } from 'fastify';

export const REFUSAL_LOG_INTERVAL_MS = 10_000;

export class RefusalLog {
  private counts = new Map<number, number>();
  /** First message per 5xx code in the interval (e.g. which store failed): operators need the why. */
  private samples = new Map<number, string>();
  /** Codes whose underlying fault was already logged (with its stack) this interval. */
  private faultsLogged = new Set<number>();
  private timer: NodeJS.Timeout | undefined;
  private since = Date.now();

  constructor(
    private readonly log: FastifyBaseLogger,
    private readonly intervalMs = REFUSAL_LOG_INTERVAL_MS,
  ) {}

  /** Counts one refusal; `fault` is the error behind a 5xx refusal, if there is one. */
  record(code: number, detail?: string, fault?: Error): void {
    if (fault && code >= 5000 && !this.faultsLogged.has(code)) {
      this.faultsLogged.add(code);
      this.log.error(
        { err: fault, code },
        'refusal caused by a fault (logged once per interval; see the summary)',
      );
    }
    this.counts.set(code, (this.counts.get(code) ?? 0) + 1);
    if (code >= 5000 && detail !== undefined && !this.samples.has(code)) this.samples.set(code, detail);
    if (!this.timer) {
      if (this.counts.size === 1 && this.counts.get(code) === 1) this.since = Date.now();
      this.timer = setTimeout(() => this.flush(), this.intervalMs);
      this.timer.unref();
    }
  }

  /** Writes the summary of the refusals counted since the last one (nothing if there were none). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.counts.size === 0) return;
    const refused = Object.fromEntries([...this.counts].sort(([a], [b]) => a - b));
    const total = [...this.counts.values()].reduce((a, b) => a + b, 0);
    const samples = this.samples.size > 0 ? Object.fromEntries(this.samples) : undefined;
    const seconds = Math.round((Date.now() - this.since) / 100) / 10;
    const serverSide = [...this.counts.keys()].some((code) => code >= 5000);
    this.counts = new Map();
    this.samples = new Map();
    this.faultsLogged = new Set();
    this.since = Date.now();
    const line = { refused, total, seconds, ...(samples ? { samples } : {}) };
    if (serverSide) this.log.warn(line, 'requests refused');
    else this.log.info(line, 'requests refused');
  }
}
