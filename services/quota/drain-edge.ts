// The gateway pod's preStop (the quota container runs it: the Envoy image has no client to call its
// admin interface with): asks the pod's Envoy, on the loopback admin port, to drain its listeners — with
// --drain-strategy immediate every answer from then on closes its client connection, so clients
// reconnect through the Service to another gateway pod — and waits as long as Envoy stays up (its own
// preStop), so that ext_authz answers to the end; then the kubelet sends this container SIGTERM.
//   node dist/services/quota/drain-edge.js <envoy admin port> <seconds to wait>

import { setTimeout as sleep } from 'node:timers/promises';

const [adminPort = Number.NaN, seconds = Number.NaN] = process.argv.slice(2).map(Number);
if (!Number.isInteger(adminPort) || !Number.isFinite(seconds)) {
  console.error('usage: drain-edge.js <envoy admin port> <seconds to wait>');
  process.exit(2);
}
try {
  const res = await fetch(`http://127.0.0.1:${adminPort}/drain_listeners?graceful`, { method: 'POST' });
  console.log(`drain-edge: Envoy answered ${res.status} to drain_listeners`);
} catch (err) {
  // Envoy already gone: nothing to drain, and the pod stops anyway.
  console.error(`drain-edge: ${(err as Error).message}`);
}
await sleep(seconds * 1000);
