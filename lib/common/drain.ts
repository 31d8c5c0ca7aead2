// Draining: once the server is closing, every response (those of the requests in flight) carries
// `Connection: close`, so each keep-alive connection ends with its last answer. Without it a pooled
// connection (Envoy keeps them for long) holds the closing server open until the client lets go or
// the grace period kills the process (exit 1) — no request lost either way, but the drain never ends.
//
// Before it closes, a server behind a load balancer first keeps serving for a while (SHUTDOWN_DELAY_MS,
// `drainFirst`): readiness answers 503 (probes.ts) and every answer closes its connection, so the
// endpoints, kube-proxy and Envoy's pooled connections move to other pods while nothing is refused yet.
// The state is kept per HTTP server, which the root instance and every plugin inside it share.

import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';

const draining = new WeakSet<Server>();

/** Whether `app`'s server is draining (any instance of the app: root or plugin). */
export function isDraining(app: FastifyInstance): boolean {
  return draining.has(app.server);
}

/** Called by createRootApp on every root instance, before any route. */
export function closeConnectionsWhenDraining(app: FastifyInstance): void {
  app.addHook('preClose', async () => {
    draining.add(app.server);
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    if (draining.has(app.server)) reply.header('connection', 'close');
    return payload;
  });
}

/** The first shutdown step: drains `app` (set up by closeConnectionsWhenDraining) for `ms`, still serving. */
export async function drainFirst(app: FastifyInstance, ms: number): Promise<void> {
  draining.add(app.server);
  if (ms > 0) await sleep(ms);
}
