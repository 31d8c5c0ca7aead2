// Draining: once the server is closing, every response (those of the requests in flight) carries
// `Connection: close`, so each keep-alive connection ends with its last answer. Without it a pooled
// connection (Envoy keeps them for long) holds the closing server open until the client lets go or
// the grace period kills the process (exit 1) — no request lost either way, but the drain never ends.
//
// Before it closes, a server behind a load balancer first keeps serving for a while (SHUTDOWN_DELAY_MS,
// `drainFirst`): /internal/ready answers 503 and every answer closes its connection, so the endpoints,
// kube-proxy and Envoy's pooled connections move to other pods while nothing is refused yet.

import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { ERRORS } from './errors.ts';

const draining = new WeakSet<FastifyInstance>();

/** Call on the root instance before registering routes. */
export function closeConnectionsWhenDraining(app: FastifyInstance): void {
  app.addHook('preClose', async () => {
    draining.add(app);
  });
  app.addHook('onRequest', async (request, reply) => {
    if (draining.has(app) && request.url === '/internal/ready') {
      return reply
        .code(ERRORS.UNAVAILABLE.status)
        .send({ code: ERRORS.UNAVAILABLE.code, message: 'Draining: shutting down' });
    }
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    if (draining.has(app)) reply.header('connection', 'close');
    return payload;
  });
}

/** The first shutdown step: drains `app` (set up by closeConnectionsWhenDraining) for `ms`, still serving. */
export async function drainFirst(app: FastifyInstance, ms: number): Promise<void> {
  draining.add(app);
  if (ms > 0) await sleep(ms);
}
