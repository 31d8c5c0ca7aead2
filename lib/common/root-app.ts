// Every service's root Fastify instance: the same logging, proxy trust, time-outs and envelope
// handling, so a refusal looks the same whichever process answers it — including the refusals the
// HTTP layer raises before any route (connection-guards.ts).

import type { Server } from 'node:http';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import { decorateClientKey } from './client-key.ts';
import type { CoreConfig } from './config.ts';
import { handleClientError, installExpectGuard, type LingerOptions } from './connection-guards.ts';
import { closeConnectionsWhenDraining } from './drain.ts';
import { allowedMethods, installEnvelopeHandlers } from './envelope.ts';
import { FRAMING_BYTES, maxHeaderBytes } from './http-limits.ts';
import { traceContextMixin } from './logging.ts';
import { RefusalLog } from './refusal-log.ts';

export interface RootAppOptions {
  config: Pick<CoreConfig, 'logLevel' | 'trustedProxyHops'> &
    Partial<Pick<CoreConfig, 'clientIpv6PrefixLength'>> & { maxFileBytes: number };
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean | undefined;
  /** Where log lines go (default stdout); tests capture them. */
  logStream?: { write(line: string): unknown } | undefined;
  /** Interval of the refusal summary lines (default 10 s). */
  refusalLogIntervalMs?: number | undefined;
}

/**
 * How much of a refused upload is read and dropped (before the answer behind a proxy, after it
 * otherwise): two upload limits plus framing, or 10 s, so that clients writing their whole body first
 * still read the answer. The edge refuses longer declared bodies unread (the chart derives
 * its bound from this function: templates/_derived.tpl).
 */
export function refusedBodyBounds(maxFileBytes: number): LingerOptions {
  return { maxBytes: 2 * maxFileBytes + FRAMING_BYTES, maxMs: 10_000, idleMs: 2_000 };
}

export function createRootApp({
  config,
  logger,
  logStream,
  refusalLogIntervalMs,
}: RootAppOptions): FastifyInstance {
  const app: FastifyInstance = Fastify({
    // JSON lines; each one logged during a traced request names its trace (logging.ts).
    logger:
      logger === false
        ? false
        : { level: config.logLevel, mixin: traceContextMixin, ...(logStream ? { stream: logStream } : {}) },
    // Only faults are logged one by one (by the error handler); refusals are counted; never bodies.
    logController: new LogController({ disableRequestLogging: true }),
    // Trust exactly as many X-Forwarded-For hops as the edge in front of us adds (Envoy: 1).
    trustProxy: (_address: string, hop: number) => hop < config.trustedProxyHops,
    // Backstops: intake refuses idle uploads itself (UPLOAD_IDLE_TIMEOUT_MS) in the envelope.
    requestTimeout: 120_000,
    connectionTimeout: 130_000,
    // Shutdown answers through the services (the work gate), in the envelope, not Fastify's bare 503.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // A missing Host is refused by the envelope's own hook (Node's answer is an empty 400). Behind a
    // proxy, room for the headers it adds (http-limits.ts).
    http: { requireHostHeader: false, maxHeaderSize: maxHeaderBytes(config.trustedProxyHops) },
    // Framing errors, 431 and 408 in the envelope (Fastify's default answers {error, statusCode}).
    clientErrorHandler: (err, socket) =>
      handleClientError(err, socket, {
        allowedMethods: (path) => allowedMethods(app, path),
        onRefused: (code) => refusals.record(code),
      }),
  });
  // On SIGTERM (boot.ts): readiness off, each answer closing its connection, before any route.
  closeConnectionsWhenDraining(app);
  // The one client identity every per-address limit keys on (an IPv6 client is its network).
  decorateClientKey(app, config.clientIpv6PrefixLength);
  const refusals = new RefusalLog(app.log, refusalLogIntervalMs);
  const linger = refusedBodyBounds(config.maxFileBytes);
  // Behind a proxy (Envoy streams the body on), a refused body is read to its end before the answer.
  installEnvelopeHandlers(app, { linger, refusals, answerAfterBody: config.trustedProxyHops > 0 });
  installExpectGuard(app.server as Server, {
    maxFileBytes: config.maxFileBytes,
    framingBytes: FRAMING_BYTES,
    linger,
    onRefused: (code) => refusals.record(code),
  });
  return app;
}
