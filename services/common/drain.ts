// Draining: once the server is closing, every response (those of the requests in flight) carries
// `Connection: close`, so each keep-alive connection ends with its last answer. Without it a pooled
// connection (Envoy keeps them for long) holds the closing server open until the client lets go or
// the grace period kills the process (exit 1) — no request lost either way, but the drain never ends.

import type { FastifyInstance } from 'fastify';

/** Call on the root instance before registering routes. */
export function closeConnectionsWhenDraining(app: FastifyInstance): void {
  let draining = false;
  app.addHook('preClose', async () => {
    draining = true;
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    if (draining) reply.header('connection', 'close');
    return payload;
  });
}
