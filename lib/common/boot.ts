// The steps every server process takes, one way: its configuration validated (a bad value: one line
// naming the variable, exit 2), telemetry started before anything loads the HTTP stack (callers import
// the rest dynamically after startProcess), and once the port is bound one line on stdout with the
// address the server got, whatever LOG_LEVEL: with port 0 the OS picks a free port, and whoever started
// the process (tests, scripts) reads it from this line instead of choosing a port in advance and racing
// other processes for it.

import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { type Env, loadOrExit } from './config.ts';

export interface ProcessNames {
  /** How the process names itself on stderr ("nsfwdetector quota: ..."). */
  who: string;
  /** The OpenTelemetry service.name. */
  serviceName: string;
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

/** A boot step that cannot succeed: one line on stderr, then the exit code (2: configuration, data). */
export function exitAtBoot(who: string, message: string, code: number): never {
  console.error(`${who}: ${message}`);
  process.exit(code);
}
