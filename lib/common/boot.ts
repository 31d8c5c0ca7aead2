// The one way every process boots (detect, quota, health, the embedded server, the operator):
//   1. its configuration, validated once (a bad value: one line naming the variable, exit 2);
//   2. telemetry, started before anything loads the HTTP stack (`compose` imports it dynamically);
//   3. its parts (`compose`: stores, the app, what runs beside it); a part that cannot start throws a
//      BootFailure (a required Redis unreachable, an unusable file): one line, exit 2;
//   4. SIGTERM / SIGINT → readiness off and every answer closing its connection for SHUTDOWN_DELAY_MS
//      (drain.ts, probes.ts) → new work refused → the server closed once in-flight requests finish →
//      the parts released in order → exit 0, all under the SHUTDOWN_GRACE_MS timer (shutdown.ts);
//   5. listen (a port in use: one line, exit 2), then one line on stdout with the address the server got, whatever LOG_LEVEL: with port 0
//      the OS picks a free port, and whoever started the process (tests, scripts) reads it from this
//      line instead of choosing a port in advance and racing other processes for it;
//   6. what starts once listening (the model load, leader election), then the ready line if any.
// A process's server.ts declares its parts and calls runProcess; nothing else.

import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { type CoreConfig, type Env, loadOrExit } from './config.ts';

export interface ProcessNames {
  /** How the process names itself on stderr ("nsfwdetector quota: ..."). */
  who: string;
  /** The OpenTelemetry service.name. */
  serviceName: string;
}

/** What a process is made of, as its `compose` returns it. */
export interface ProcessParts {
  /** The root instance (createRootApp): its routes, its probes (probes.ts). */
  app: FastifyInstance;
  port: number;
  /** Fields of the "listening" line (the service, its stores, ...). */
  announce?: Record<string, unknown>;
  /** After the drain, before the server closes: refuse new work (the work gate). */
  refuseNewWork?: () => unknown;
  /** After the server has closed (in-flight requests answered), in order: models, stores, ... */
  release?: Array<() => unknown>;
  /** Once listening: what may take long (loading a model) or needs the port (leader election). */
  start?: () => Promise<void>;
  /** Printed once `start` has finished, with the server's public URL (the embedded server's ready line). */
  readyLine?: (url: string) => string;
}

/** What `compose` may use: `stop` ends the process as SIGTERM does (code 1: a part failed for good). */
export interface ProcessControl {
  stop: (reason: string, code?: number) => Promise<void>;
}

export interface ProcessDeclaration<C extends CoreConfig> extends ProcessNames {
  load: (env: Env) => C;
  compose: (config: C, control: ProcessControl) => Promise<ProcessParts>;
}

export async function runProcess<C extends CoreConfig>(declared: ProcessDeclaration<C>): Promise<void> {
  const config = await startProcess(declared, declared.load);
  const [{ installShutdown }, { drainFirst }, { stopTelemetry }] = await Promise.all([
    import('./shutdown.ts'),
    import('./drain.ts'),
    import('./telemetry.ts'),
  ]);
  let stop: ProcessControl['stop'] = async () => {};
  const parts = await declared
    .compose(config, { stop: (reason, code) => stop(reason, code) })
    .catch((err: unknown) => {
      if (err instanceof BootFailure) exitAtBoot(declared.who, err.message, err.exitCode);
      throw err;
    });
  const { app } = parts;
  stop = installShutdown({
    log: app.log,
    graceMs: config.shutdownGraceMs,
    steps: [
      () => drainFirst(app, config.shutdownDelayMs),
      async () => parts.refuseNewWork?.(),
      () => app.close(),
      ...(parts.release ?? []),
      () => stopTelemetry(),
    ],
  });
  const address = await listen(app, { port: parts.port, host: config.host }, parts.announce).catch(
    (err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
        exitAtBoot(declared.who, portInUse(parts.port, config.host), 2);
      }
      throw err;
    },
  );
  await parts.start?.();
  if (parts.readyLine) console.log(parts.readyLine(publicUrl(address)));
}

export async function startProcess<C extends { traceSampleRatio: number }>(
  names: ProcessNames,
  load: (env: Env) => C,
): Promise<C> {
  const config = loadOrExit(names.who, load);
  // Loaded here, not at the top: the admin CLI and the stores use this module without telemetry.
  const { startTelemetry } = await import('./telemetry.ts');
  await startTelemetry({ serviceName: names.serviceName, sampleRatio: config.traceSampleRatio });
  return config;
}

/** Binds the port and announces it; `fields` (the service, its stores, ...) join the line. */
export async function listen(
  app: FastifyInstance,
  where: { port: number; host: string },
  fields: Record<string, unknown> = {},
): Promise<AddressInfo> {
  await app.listen(where);
  const address = app.server.address() as AddressInfo;
  process.stdout.write(
    `${JSON.stringify({ msg: 'listening', ...fields, address: address.address, port: address.port })}\n`,
  );
  return address;
}

/** The one line for a port another process holds (listen's EADDRINUSE). */
export function portInUse(port: number, host: string): string {
  return `port ${port} on ${host} is already in use (another nsfwdetector, or another program): stop it, or choose another port (0 picks a free one)`;
}

/** The URL a person can open: localhost for a wildcard address. */
export function publicUrl(address: AddressInfo): string {
  const wildcard = address.address === '0.0.0.0' || address.address === '::';
  const host = wildcard ? 'localhost' : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/**
 * What a `compose` step throws when the process cannot start for a reason outside the code (an
 * unreachable Redis it requires, an unusable accounts file or kubeconfig): runProcess prints the
 * message as one line and exits with `exitCode`, without a stack trace.
 */
export class BootFailure extends Error {
  override name = 'BootFailure';
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

/** An error's message and, when it has one, its cause's: "Redis not ready after 500 ms (connect ECONNREFUSED …)". */
export function withCause(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const cause = err instanceof Error ? err.cause : undefined;
  if (cause === undefined) return message;
  return `${message} (${cause instanceof Error ? cause.message : String(cause)})`;
}

/** A boot step that cannot succeed: one line on stderr, then the exit code (2: configuration, data). */
export function exitAtBoot(who: string, message: string, code: number): never {
  console.error(`${who}: ${message}`);
  process.exit(code);
}
