// The slowloris attacker of slow-clients.test.ts, in a process of its own (its 10,000+ sockets must not
// slow the test's own clients): SLOTS connections from one address, each sending one byte of a request
// line and headers that never end every INTERVAL_MS, as the classic tool does; a slot whose connection
// was closed connects again at its next tick — or, with RECONNECT=at-once, the moment it is closed.
// With SEND=nothing a connection sends nothing at all (it waits for the idle timeout). Prints its
// state as one JSON line a second; stops on SIGTERM or after DURATION_MS. Plain Node (no imports but
// node:net, types only stripped), so that a pod can run it from a ConfigMap (edge-slowloris.suite.ts).

import { connect, type Socket } from 'node:net';

const env = (name: string) => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const HOST = process.env.EDGE_HOST ?? '127.0.0.1';
const PORT = Number(env('EDGE_PORT'));
const FROM = env('FROM_ADDRESS');
const SLOTS = Number(env('SLOTS'));
const INTERVAL_MS = Number(env('INTERVAL_MS'));
const DURATION_MS = Number(env('DURATION_MS'));
const AT_ONCE = process.env.RECONNECT === 'at-once';
const SILENT = process.env.SEND === 'nothing';
let stopping = false;

const REQUEST = 'POST /api/public/detect HTTP/1.1\r\nHost: edge\r\nContent-Type: image/jpeg\r\n';
const MORE = 'X-a: b\r\n';

const state = { open: 0, peakOpen: 0, connects: 0, closes: 0, errors: 0 };

class Slot {
  socket: Socket | undefined;
  sent = 0;

  tick(): void {
    if (!this.socket) {
      this.open();
      return;
    }
    // The request line and headers, then one more header after another, a byte at a time, forever.
    const byte = REQUEST[this.sent] ?? MORE[(this.sent - REQUEST.length) % MORE.length] ?? 'a';
    if (!this.socket.connecting && !SILENT) this.socket.write(byte);
    this.sent += 1;
  }

  open(): void {
    const socket = connect({ host: HOST, port: PORT, localAddress: FROM });
    this.socket = socket;
    this.sent = 0;
    let connected = false;
    socket.once('connect', () => {
      connected = true;
      state.connects += 1;
      state.open += 1;
      state.peakOpen = Math.max(state.peakOpen, state.open);
      this.tick();
    });
    // Read whatever the edge answers (a 408, a close), so that its close is seen.
    socket.resume();
    socket.on('error', () => {
      state.errors += 1;
    });
    socket.once('close', () => {
      if (connected) {
        state.open -= 1;
        state.closes += 1;
      }
      this.socket = undefined;
      // Opened again at once (a refused connect too, after a breath so as not to spin on an error).
      if (AT_ONCE && !stopping) {
        if (connected) this.open();
        else setTimeout(() => !stopping && !this.socket && this.open(), 10);
      }
    });
  }
}

const slots = Array.from({ length: SLOTS }, () => new Slot());
// Connect them all at once, then tick each on its own phase of the interval.
for (const slot of slots) slot.open();
const timers = slots.map((slot, i) =>
  setTimeout(
    () => {
      slot.tick();
      timers[i] = setInterval(() => slot.tick(), INTERVAL_MS);
    },
    (i * INTERVAL_MS) / SLOTS,
  ),
);
const report = setInterval(() => process.stdout.write(`${JSON.stringify(state)}\n`), 1000);

const stop = () => {
  stopping = true;
  clearInterval(report);
  for (const timer of timers) clearInterval(timer);
  for (const slot of slots) slot.socket?.destroy();
  process.stdout.write(`${JSON.stringify({ ...state, done: true })}\n`);
  process.exit(0);
};
process.once('SIGTERM', stop);
setTimeout(stop, DURATION_MS);
