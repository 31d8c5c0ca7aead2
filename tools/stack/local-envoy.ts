// An Envoy run on this machine (the stack, the tests' edge): its command line, and what it tells
// through its admin interface while it starts — where the admin listens (the file
// `--admin-address-path` names) and which port a listener got (a listener on port 0). Each of those
// answers undefined until Envoy has got that far, for the caller's wait loop.

import { readFileSync } from 'node:fs';

/** Envoy's arguments for `configPath`, the admin's address written to `adminPath`. */
export function localEnvoyArgs(
  configPath: string,
  adminPath: string,
  opts: { concurrency: number; logLevel: string; flushIntervalMs?: number },
): string[] {
  return [
    '-c',
    configPath,
    '--admin-address-path',
    adminPath,
    // Several Envoys may run on one machine (tests): no shared hot-restart memory.
    '--disable-hot-restart',
    '--concurrency',
    String(opts.concurrency),
    ...(opts.flushIntervalMs !== undefined
      ? ['--file-flush-interval-msec', String(opts.flushIntervalMs)]
      : []),
    '--log-level',
    opts.logLevel,
  ];
}

/** The admin's URL from the file Envoy writes at start, or undefined before it has. */
export function envoyAdminUrl(addressPath: string): string | undefined {
  try {
    const address = readFileSync(addressPath, 'utf8').trim();
    return address ? `http://${address}` : undefined;
  } catch {
    return undefined;
  }
}

/** The port the listener `name` is bound to, or undefined before it is (or while the admin does not answer). */
export async function envoyListenerPort(adminUrl: string, name: string): Promise<number | undefined> {
  try {
    const res = await fetch(`${adminUrl}/listeners?format=json`);
    const body = (await res.json()) as {
      listener_statuses?: Array<{
        name: string;
        local_address?: { socket_address?: { port_value?: number } };
      }>;
    };
    return body.listener_statuses?.find((l) => l.name === name)?.local_address?.socket_address?.port_value;
  } catch {
    return undefined;
  }
}
