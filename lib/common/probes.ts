// The two probes every process answers, in one shape. GET /internal/live: failing means only a restart
// helps. GET /internal/ready: failing means "send me no traffic now". Both answer 200 with the success
// envelope ({status: 'ok' | 'ready', ...}) or 503 with the error table's UNAVAILABLE entry and the reason
// as its message. While the process drains (SIGTERM, drain.ts) readiness is off before any check runs.

import type { FastifyInstance, FastifyReply } from 'fastify';
import { isDraining } from './drain.ts';
import { ok, sendError } from './envelope.ts';
import { ApiError, isApiError } from './errors.ts';

export const PROBE_PATHS = { live: '/internal/live', ready: '/internal/ready' } as const;

/** What a failing check throws: 503/5001 with `reason` as the message. */
export function unavailable(reason: string, cause?: unknown): ApiError {
  return new ApiError('UNAVAILABLE', reason, {}, cause);
}

/**
 * A probe's check: returns the extra fields of its 200 answer (or nothing), or throws why it fails
 * (an ApiError as it is; anything else as UNAVAILABLE).
 */
export type ProbeCheck = () => ProbeData | Promise<ProbeData>;
type ProbeData = Record<string, unknown> | undefined;

export interface ProbeChecks {
  live?: ProbeCheck;
  ready?: ProbeCheck;
}

export function registerProbes(app: FastifyInstance, checks: ProbeChecks = {}): void {
  app.get(PROBE_PATHS.live, async (_request, reply) => answer(reply, 'ok', checks.live));
  app.get(PROBE_PATHS.ready, async (_request, reply) => {
    if (isDraining(app)) return sendError(reply, unavailable('Draining: shutting down'));
    return answer(reply, 'ready', checks.ready);
  });
}

async function answer(reply: FastifyReply, status: 'ok' | 'ready', check: ProbeCheck | undefined) {
  try {
    const data = await check?.();
    return ok({ status, ...(data ?? {}) });
  } catch (err) {
    return sendError(reply, isApiError(err) ? err : unavailable('Not ready', err));
  }
}
