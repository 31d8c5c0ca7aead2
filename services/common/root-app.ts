// Every service's root Fastify instance: the same logging, proxy trust, time-outs and envelope
// handling, so a refusal looks the same whichever process answers it.

import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { Config } from './config.ts';
import { installEnvelopeHandlers } from './envelope.ts';
import { traceContextMixin } from './logging.ts';

export interface RootAppOptions {
  config: Config;
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean | undefined;
}

export function createRootApp({ config, logger }: RootAppOptions): FastifyInstance {
  const app = Fastify({
    // JSON lines; each one logged during a traced request names its trace (logging.ts).
    logger: logger === false ? false : { level: config.logLevel, mixin: traceContextMixin },
    // Only failures are logged (5xx, by the error handler); never request bodies.
    logController: new LogController({ disableRequestLogging: true }),
    // Trust exactly as many X-Forwarded-For hops as the edge in front of us adds (Envoy: 1).
    trustProxy: (_address: string, hop: number) => hop < config.trustedProxyHops,
    // Backstops: intake refuses idle uploads itself (UPLOAD_IDLE_TIMEOUT_MS) in the envelope.
    requestTimeout: 120_000,
    connectionTimeout: 130_000,
    // Shutdown answers through the services (the work gate), in the envelope, not Fastify's bare 503.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
  });
  // Refused uploads are drained up to the upload limit (plus multipart framing), then cut.
  installEnvelopeHandlers(app, { maxDiscardBytes: config.maxFileBytes + 1024 * 1024 });
  return app;
}
