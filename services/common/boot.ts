// One line on stdout with the address the server got, whatever LOG_LEVEL: with PORT=0 (or QUOTA_PORT=0)
// the OS picks a free port, and whoever started the process (tests, scripts) reads it from this line
// instead of choosing a port in advance and racing other processes for it.

import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';

export function announceListening(app: FastifyInstance): void {
  const { address, port } = app.server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ msg: 'listening', address, port })}\n`);
}
